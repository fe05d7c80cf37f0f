"""The runtime picks the torch thread count of in-loop models (1 unless told), and says where it comes from."""
import pytest
import torch

from embodia.agent.loop.factory import DEFAULT_THREADS, THREADS_ENV, make_policy, policy_threads
from embodia.devices import open_device


def test_policy_threads_explicit_env_default(monkeypatch):
    monkeypatch.delenv(THREADS_ENV, raising=False)
    assert policy_threads() == (DEFAULT_THREADS, policy_threads()[1]) and DEFAULT_THREADS == 1
    assert policy_threads(2) == (2, "asked for")
    monkeypatch.setenv(THREADS_ENV, "2")
    assert policy_threads() == (2, f"${THREADS_ENV}")
    monkeypatch.setenv(THREADS_ENV, "two")
    with pytest.raises(ValueError, match="whole number"):
        policy_threads()


def test_loading_the_bundled_vla_sets_the_default(monkeypatch):
    monkeypatch.delenv(THREADS_ENV, raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with open_device("sim:twogap-push?render=0") as dev:
            make_policy("embodia-tiny", dev)
            assert torch.get_num_threads() == 1
            make_policy("embodia-tiny", dev, threads=2)
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
