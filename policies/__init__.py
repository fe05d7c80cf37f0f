"""Policy implementations; `agent.factory.make_policy` turns a --policy string into one."""
from .base import GuiReplayPolicy, RandomPolicy, ReplayPolicy, screen_divergence
from .gui_prompt import ChatGuiPolicy, PolicyGaveUp
from .remote import EndpointError, OpenAIPolicy
from .screen_memory import ScreenMemoryPolicy

__all__ = ["GuiReplayPolicy", "RandomPolicy", "ReplayPolicy", "screen_divergence", "ChatGuiPolicy", "EndpointError",
           "OpenAIPolicy", "PolicyGaveUp", "ScreenMemoryPolicy", "LocalVLMPolicy", "ModelLoadError"]


def __getattr__(name: str):
    if name in ("LocalVLMPolicy", "ModelLoadError"):     # imports torch: only when asked for
        from . import local_vlm
        return getattr(local_vlm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
