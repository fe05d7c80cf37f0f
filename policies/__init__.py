"""Policy implementations; `agent.factory.make_policy` turns a --policy string into one."""
from .base import GuiReplayPolicy, RandomPolicy, ReplayPolicy, screen_divergence
from .remote import EndpointError, OpenAIPolicy, PolicyGaveUp

__all__ = ["GuiReplayPolicy", "RandomPolicy", "ReplayPolicy", "screen_divergence", "EndpointError",
           "OpenAIPolicy", "PolicyGaveUp"]
