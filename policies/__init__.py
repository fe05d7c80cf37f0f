"""Policy implementations; `agent.factory.make_policy` turns a --policy string into one."""
from .base import RandomPolicy, ReplayPolicy

__all__ = ["RandomPolicy", "ReplayPolicy"]
