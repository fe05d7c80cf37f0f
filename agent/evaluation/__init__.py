"""Evaluation: many episodes, honest statistics, and the success-memory evaluation.

Owns: ``evaluate`` and its JSON report, Wilson and Newcombe intervals, memory-on vs memory-off
streams (``memory_eval``), and offline evaluation on recorded episodes, no device (``offline``).
May import: ``embodia.agent.loop`` and everything below it.
"""
from embodia.agent.evaluation.evaluate import evaluate, summarize, write_json
from embodia.agent.evaluation.stats import newcombe, newcombe_paired, wilson

__all__ = ["evaluate", "summarize", "write_json", "wilson", "newcombe", "newcombe_paired"]
