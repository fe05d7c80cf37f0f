"""Serving: the policy server (``embodia serve``, openpi's websocket + msgpack protocol).

May import: ``embodia.agent.loop`` (the factory) and everything below it.
"""
