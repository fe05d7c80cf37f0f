"""`--policy openai:<model>` against an endpoint that misbehaves (issue 55): a reply trickled byte by
byte, its status line trickled, or a body far over the size cap (declared, or sent without a length).
The decision ends within the policy's deadline plus a second, the episode's error is one line that
names the cause, and the device executes nothing.

Before: the policy read replies with ``urlopen(timeout=T)``, which bounds each socket read, not the
reply: a trickled reply ran on for as long as the server kept sending, and any body was read whole."""
import json
import time

import pytest
from bad_endpoint import BadEndpoint
from fake_phone import Phone

from embodia.agent.loop.episode import run_episode
from embodia.policies.gui.remote import EndpointError, OpenAIPolicy

DEADLINE = 2.0
CAP = 64 << 10
GOOD = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant",
                                                        "content": '{"type": "click", "point": [500, 500]}'}}]}).encode()


@pytest.fixture
def endpoint(request):
    srv = BadEndpoint(GOOD, request.param, byte_s=0.2)
    yield srv
    srv.close()


CAUSES = {"trickle": f"within {DEADLINE:g} s", "trickle-headers": f"within {DEADLINE:g} s",
          "huge": f"over the {CAP} byte limit", "huge-chunked": f"longer than the {CAP} byte limit"}


@pytest.mark.parametrize("endpoint", list(CAUSES), indirect=True)
def test_a_trickled_or_oversized_reply_ends_the_decision_in_time_and_executes_nothing(endpoint):
    dev = Phone()
    pol = OpenAIPolicy("test", endpoint.url, api_key_env=None, timeout_s=DEADLINE, max_reply_bytes=CAP,
                       backoff_s=0.01).bind(dev.embodiment)
    t0 = time.monotonic()
    r = run_episode(dev, pol, instruction="press it", max_steps=3)
    took = time.monotonic() - t0
    assert took <= DEADLINE + 1.0, (endpoint.mode, took)
    assert dev.log == [] and r.steps == 0
    assert r.error.startswith("EndpointError") and "\n" not in r.error, r.error
    assert CAUSES[endpoint.mode] in r.error and endpoint.url in r.error, r.error


@pytest.mark.parametrize("endpoint", ["trickle"], indirect=True)
def test_the_deadline_covers_the_whole_decision_and_a_direct_call_raises_one_line(endpoint):
    pol = OpenAIPolicy("test", endpoint.url, api_key_env=None, timeout_s=1.0, http_retries=5).bind(Phone().embodiment)
    t0 = time.monotonic()
    with pytest.raises(EndpointError) as e:
        pol.act(Phone().observe(), "press it")
    assert time.monotonic() - t0 <= 2.0 and "\n" not in str(e.value) and "within 1 s" in str(e.value)


def test_a_deadline_or_a_cap_that_is_not_positive_is_refused():
    with pytest.raises(ValueError, match="timeout_s and max_reply_bytes must be > 0"):
        OpenAIPolicy("test", "http://127.0.0.1:9/v1", timeout_s=0)
