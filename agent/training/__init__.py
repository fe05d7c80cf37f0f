"""Training: the VLA (``train``), the GUI head (``gui_train``, on ``gui_data`` demos), and the
committed command that rebuilds the bundled ``embodia-tiny`` (``embodia train tiny``).

May import: ``embodia.agent.recording`` (datasets), ``embodia.policies``, ``embodia.action_heads``,
``embodia.sim`` (demo recording). Nothing here runs at import time.
"""
