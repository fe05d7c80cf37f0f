"""The Policy base class (`base`) and its implementations; `embodia.agent.loop.factory.make_policy` turns a
--policy string into one."""
if __name__ != "embodia.policies":     # the folder is the source of embodia.policies, never a package of its own
    raise ModuleNotFoundError(f"no module named {__name__!r}: import embodia.policies", name=__name__)
from pathlib import Path

from embodia.policies.base import GuiReplayPolicy, Policy, RandomPolicy, ReplayPolicy, as_policy, screen_divergence
from embodia.policies.gui.prompt import ChatGuiPolicy, PolicyGaveUp
from embodia.policies.gui.remote import EndpointError, OpenAIPolicy
from embodia.policies.gui.screen_memory import ScreenMemoryPolicy

#: the checkpoints that ship inside the package (embodia-tiny)
BUNDLED_CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"

__all__ = ["BUNDLED_CHECKPOINTS", "Policy", "as_policy", "GuiReplayPolicy", "RandomPolicy", "ReplayPolicy", "screen_divergence", "ChatGuiPolicy", "EndpointError",
           "OpenAIPolicy", "PolicyGaveUp", "ScreenMemoryPolicy", "LocalVLMPolicy", "ModelLoadError"]


def __getattr__(name: str):
    if name in ("LocalVLMPolicy", "ModelLoadError"):     # imports torch: only when asked for
        from embodia.policies.gui import local_vlm
        return getattr(local_vlm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
