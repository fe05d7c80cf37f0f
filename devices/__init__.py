"""The vocabulary (Embodiment, Observation, actions, the Device base class) and the device adapters."""
if __name__ != "embodia.devices":     # the folder is the source of embodia.devices, never a package of its own
    raise ModuleNotFoundError(f"no module named {__name__!r}: import embodia.devices", name=__name__)
from embodia.devices import gl  # noqa: F401  (chooses offscreen GL before anything imports mujoco)
from embodia.devices.actions import ActionError, GuiAction, check_action, check_chunk
from embodia.devices.base import Device, DeviceLost, SimDevice, as_device
from embodia.devices.embodiment import Camera, Channel, Embodiment, Screen
from embodia.devices.observation import ACTION, IMAGES, STATE, TASK, Observation, image_key
from embodia.devices.registry import available, open_device, parse_uri, register

__all__ = ["ActionError", "GuiAction", "check_action", "check_chunk", "Device", "DeviceLost",
           "SimDevice", "as_device", "Camera", "Channel", "Embodiment", "Screen", "ACTION", "IMAGES",
           "STATE", "TASK", "Observation", "image_key", "available", "open_device", "parse_uri", "register"]
