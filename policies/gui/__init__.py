"""Screen policies: model-reply parsing (``reply``), the chat prompt and its test-time scaling
(``prompt``), served (``remote``) and local (``local_vlm``) VLMs, ``embodia-tiny``'s GUI head
(``head``), and the screen-memory wrapper (``screen_memory``).
"""
