"""Robot policies: the VLA (backbone + embodiment prompt + DiT head) and its success-memory
steering (``SteeredPolicy``). Torch is imported only by these modules.
"""
