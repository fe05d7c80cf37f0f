"""Policy implementations; `agent.factory.make_policy` turns a --policy string into one."""
from .base import GuiReplayPolicy, RandomPolicy, ReplayPolicy, screen_divergence

__all__ = ["GuiReplayPolicy", "RandomPolicy", "ReplayPolicy", "screen_divergence"]
