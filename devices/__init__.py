"""The vocabulary (Embodiment, Observation, actions, Device/Policy protocols) and the device adapters."""
from . import gl  # noqa: F401  (chooses offscreen GL before anything imports mujoco)
from .actions import ActionError, GuiAction, check_action, check_chunk
from .base import Device, DeviceLost, Policy, SimDevice, policy_info
from .embodiment import Camera, Channel, Embodiment, Screen
from .observation import ACTION, IMAGES, STATE, TASK, Observation, image_key
from .registry import available, open_device, parse_uri, register

__all__ = ["ActionError", "GuiAction", "check_action", "check_chunk", "Device", "DeviceLost", "Policy",
           "SimDevice", "policy_info", "Camera", "Channel", "Embodiment", "Screen", "ACTION", "IMAGES",
           "STATE", "TASK", "Observation", "image_key", "available", "open_device", "parse_uri", "register"]
