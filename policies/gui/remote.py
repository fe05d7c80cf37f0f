"""A GUI policy behind any OpenAI-compatible chat endpoint (vLLM or SGLang serving GUI-Owl, UI-TARS,
Qwen-VL; LM Studio; Ollama; OpenAI itself).

>>> pol = OpenAIPolicy("gui-owl-7b", "http://127.0.0.1:8000/v1").bind(device.embodiment)  # doctest: +SKIP
>>> pol.act(device.observe(), "tick Subscribe, then submit the form")                    # doctest: +SKIP
GuiAction(type='click', point=(371.5, 204.0), ...)

One decision is one chat request carrying the conversation of `embodia.policies.gui.prompt` (system prompt
with the action schema and coordinates; the instruction, embodiment, history, UI tree and the
screenshot as a PNG data URL), read and retried as described there: nothing unparsed is ever
executed, and after ``max_retries`` refused replies the policy raises `PolicyGaveUp`.
Every request goes through `embodia.shared.bounded_http`: ``timeout_s`` bounds the whole exchange of
one request, retries and their waits included (a reply trickled byte by byte ends there), and a reply
over ``max_reply_bytes`` is refused unread. HTTP 408/429/5xx and refused connections are retried
with exponential backoff within that time (at most ``http_retries`` times, honouring Retry-After up
to a bound); any other HTTP error, the deadline and the size cap raise `EndpointError` (one line)
naming the URL and, for a refused key, the environment variable it comes from.

Test-time scaling (``samples=N``, ``select="vote"|"judge"``, see `embodia.policies.gui.prompt`): the N
candidates come from one request with the chat-completions ``n`` parameter at
``sample_temperature``; a server that answers fewer choices than asked (some ignore ``n``) gets the
rest as separate requests, and from then on N separate requests. The judge's turn goes to
``judge_model`` when given (another model on the same endpoint), else to ``model``, greedy.

Pixel coordinates (``coords="image_px"``, Qwen2.5-VL and UI-TARS-1.5) are read against the image we
sent; its sides are rounded to multiples of 28 by default for that convention, so a Qwen processor
on the server does not resize it again. A server whose ``max_pixels`` is below the image's area
still would: lower ``image_max_side`` for it.

Only the standard library speaks HTTP. The API key is read from ``api_key_env`` at every request
(unset: no Authorization header, as a local vLLM wants) and never printed; a server error that
echoes it is redacted.
"""
from __future__ import annotations

import email.utils
import json
import os
import time

import numpy as np

from embodia.devices import Embodiment
from embodia.policies.gui.prompt import SAMPLE_TEMPERATURE, ChatGuiPolicy, resize_screen
from embodia.policies.gui.selection import VOTE_GRID
from embodia.shared.bounded_http import HTTPStatusError, ReplyDeadline, ReplyError, ReplyTooLarge, post
from embodia.shared.images import png_url

__all__ = ["OpenAIPolicy", "EndpointError", "png_data_url", "chat_completions_url", "chat_headers"]

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
RETRY_AFTER_MAX_S = 30.0
MAX_REPLY_BYTES = 16 << 20     # a chat completion is a few KB; n samples with long thoughts stay far below
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class EndpointError(ValueError):
    """The endpoint cannot be used: unreachable, refused the request (key, model, URL), or answered
    something that is not an OpenAI chat completion."""


def png_data_url(img: np.ndarray, size: tuple[int, int]) -> str:
    """The screenshot resized to ``size`` (bicubic, as Qwen processors resize) as a PNG data URL."""
    return _png_url(resize_screen(img, size))


def chat_completions_url(base_url: str) -> str:
    """The endpoint of an OpenAI-compatible server whose base URL ends in its version (``.../v1``)."""
    return base_url.rstrip("/") + "/chat/completions"


def chat_headers(api_key: str | None) -> dict:
    """A chat-completions POST's headers; the bearer key only when one is set."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _png_url(im) -> str:
    return png_url(np.asarray(im))


class OpenAIPolicy(ChatGuiPolicy):
    """GUI actions from a vision-language model behind an OpenAI-compatible ``/chat/completions``
    endpoint; see the module doc. ``base_url`` ends where the SDK's does (``http://host:8000/v1``).

    `step_record()` says what the model replied at the last decision (each attempt's text, the
    parser's error, its latency) and `info()` sums up the episode.
    """

    def __init__(self, model: str, base_url: str, *, embodiment: Embodiment | None = None,
                 api_key_env: str | None = DEFAULT_KEY_ENV, coords: str = "norm1000", max_retries: int = 2,
                 timeout_s: float = 60.0, image_max_side: int = 1280, image_multiple: int | None = None,
                 history: int = 4, temperature: float = 0.0, max_tokens: int | None = 1024,
                 system_prompt: str | None = None, extra_body: dict | None = None, supported=None,
                 http_retries: int = 3, backoff_s: float = 1.0, samples: int = 1, select="vote",
                 sample_temperature: float = SAMPLE_TEMPERATURE, vote_grid: float = VOTE_GRID,
                 judge_model: str | None = None, max_reply_bytes: int = MAX_REPLY_BYTES):
        if not model:
            raise ValueError("OpenAIPolicy needs a model name (openai:<model>)")
        if not base_url or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base URL must start with http:// or https://, got {base_url!r}")
        if http_retries < 0:
            raise ValueError("http_retries must be >= 0")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.url = chat_completions_url(self.base_url)
        self.api_key_env = api_key_env
        self.http_retries, self.backoff_s = http_retries, backoff_s
        if timeout_s <= 0 or max_reply_bytes <= 0:
            raise ValueError(f"timeout_s and max_reply_bytes must be > 0, got {timeout_s} and {max_reply_bytes}")
        self.timeout_s, self.temperature, self.max_tokens = timeout_s, temperature, max_tokens
        self.max_reply_bytes = max_reply_bytes
        self.extra_body = dict(extra_body or {})
        self.judge_model = judge_model or None
        self._n_ignored = False             # the server answered fewer choices than ``n`` asked for
        super().__init__(embodiment=embodiment, coords=coords, max_retries=max_retries,
                         image_max_side=image_max_side, image_multiple=image_multiple, history=history,
                         system_prompt=system_prompt, supported=supported, samples=samples, select=select,
                         sample_temperature=sample_temperature, vote_grid=vote_grid)

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._stats["http_retries"] = 0

    def _image_part(self, image) -> dict:
        return {"type": "image_url", "image_url": {"url": _png_url(image)}}

    # -- HTTP --------------------------------------------------------------------------------------
    def _complete(self, messages: list) -> tuple[str, dict]:
        """One chat completion: (reply text, {"ms": milliseconds including HTTP retries})."""
        t0 = time.perf_counter()
        text = self._request(messages)[0]
        return text, {"ms": (time.perf_counter() - t0) * 1e3}

    def _sample(self, messages: list, n: int) -> tuple[list[str], dict]:
        """``n`` replies at ``sample_temperature``: one request asking for ``n`` choices, topped up
        one request per missing reply when the server gives fewer."""
        t0 = time.perf_counter()
        replies, requests = [], 0
        while len(replies) < n:
            ask = 1 if self._n_ignored else n - len(replies)
            got = self._request(messages, temperature=self.sample_temperature, n=ask)
            requests += 1
            if len(got) < ask:
                self._n_ignored = True
            replies += got[:n - len(replies)]
        return replies, {"ms": (time.perf_counter() - t0) * 1e3, "requests": requests}

    def _judge(self, messages: list) -> tuple[str, dict]:
        t0 = time.perf_counter()
        text = self._request(messages, model=self.judge_model)[0]
        return text, {"ms": (time.perf_counter() - t0) * 1e3, "model": self.judge_model or self.model}

    def _request(self, messages: list, *, model: str | None = None, temperature: float | None = None,
                 n: int = 1) -> list[str]:
        """One chat-completions request; the text of each choice."""
        body = {"model": model or self.model, "messages": messages, "temperature": self.temperature,
                **({"max_tokens": self.max_tokens} if self.max_tokens else {}), **self.extra_body}
        if temperature is not None:         # sampling: after extra_body, which may hold a greedy temperature
            body["temperature"] = temperature
        if n > 1:
            body["n"] = n
        return self._reply_texts(self._post(json.dumps(body, ensure_ascii=False).encode("utf-8")))

    def _post(self, data: bytes) -> bytes:
        """The reply's body, all of it within ``timeout_s`` (retries and their waits included) and
        ``max_reply_bytes``, through `embodia.shared.bounded_http`; EndpointError (one line) otherwise."""
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        end = time.monotonic() + self.timeout_s
        for attempt in range(self.http_retries + 1):
            wait = self.backoff_s * 2 ** attempt
            left = end - time.monotonic()
            try:
                if left <= 0:
                    raise ReplyDeadline(self.url)
                return post(self.url, data, chat_headers(key), deadline_s=left, max_bytes=self.max_reply_bytes)
            except HTTPStatusError as e:
                detail = self._redact(_error_message(e.body), key)
                if e.code not in _RETRY_STATUS or attempt == self.http_retries:
                    raise EndpointError(self._refusal(e.code, e.reason, detail, key, attempt + 1)) from None
                wait, cause = _retry_after(e.headers, wait), f"HTTP {e.code}"
            except ReplyDeadline:           # final: the decision's time is spent
                raise EndpointError(f"no complete reply from {self.url} within {self.timeout_s:g} s "
                                    f"(timeout_s; {attempt + 1} tries)") from None
            except ReplyTooLarge as e:      # final: a retry would read as much again
                raise EndpointError(f"{self._redact(str(e), key)} (max_reply_bytes)") from None
            except ReplyError as e:
                msg = cause = self._redact(str(e), key)
                if attempt == self.http_retries:                                 # refused, reset, cut short
                    raise EndpointError(f"{msg} after {attempt + 1} tries; is the server running?") from None
            if time.monotonic() + wait >= end:
                raise EndpointError(f"no complete reply from {self.url} within {self.timeout_s:g} s "
                                    f"({attempt + 1} tries, the last: {cause[:200]})")
            self._stats["http_retries"] += 1
            time.sleep(wait)
        raise AssertionError("unreachable")

    def _refusal(self, code: int, reason, detail: str, key: str | None, tries: int) -> str:
        msg = f"{self.url} answered HTTP {code} {reason or ''}".rstrip()
        msg += f": {detail}" if detail else ""
        if tries > 1:
            msg += f" (after {tries} tries)"
        if code in (401, 403):
            if not self.api_key_env:
                msg += "; no API key is configured (api_key_env=None)"
            elif key:
                msg += f"; the API key comes from ${self.api_key_env}, which is set"
            else:
                msg += f"; the API key comes from ${self.api_key_env}, which is unset, so none was sent"
        elif code == 404:
            msg += (f"; check the base URL (the prefix of /chat/completions, e.g. http://host:8000/v1) "
                    f"and the model name {self.model!r}")
        return msg

    @staticmethod
    def _redact(text: str, key: str | None) -> str:
        return text.replace(key, "***") if key else text

    def _reply_texts(self, raw: bytes) -> list[str]:
        """The assistant's text of each choice of a chat completion, in ``index`` order; native tool
        calls become <tool_call> blocks."""
        try:
            choices = json.loads(raw)["choices"]
            if len(choices) > 1:
                choices = sorted(choices, key=lambda c: c.get("index", 0))
            if not choices:
                raise IndexError("no choices")
            return [self._message_text(c["message"]) for c in choices]
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            excerpt = raw[:200].decode("utf-8", "replace")
            raise EndpointError(f"{self.url} did not answer with an OpenAI chat completion: {excerpt!r}") from None

    @staticmethod
    def _message_text(msg: dict) -> str:
        content = msg.get("content")
        calls = msg.get("tool_calls") or []
        if isinstance(content, list):       # some servers send content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        text = content if isinstance(content, str) else ""
        for c in calls if isinstance(calls, list) else ():
            fn = c.get("function") if isinstance(c, dict) else None
            if isinstance(fn, dict) and fn.get("name"):
                text += "\n<tool_call>" + json.dumps({"name": fn["name"], "arguments": fn.get("arguments") or {}},
                                                     ensure_ascii=False) + "</tool_call>"
        return text


def _error_message(raw: bytes) -> str:
    """The server's own words about an HTTP error (OpenAI's error.message, or the body's start)."""
    body = raw.decode("utf-8", "replace")
    try:
        err = json.loads(body).get("error")
        msg = err.get("message") if isinstance(err, dict) else err
        if isinstance(msg, str) and msg:
            body = msg
    except (ValueError, AttributeError):
        pass
    body = " ".join(body.split())
    return body if len(body) <= 300 else body[:299] + "…"


def _retry_after(headers, default: float) -> float:
    """Seconds from a Retry-After header (seconds or an HTTP date), bounded; ``default`` without one."""
    v = headers.get("Retry-After") if headers is not None else None
    if not v:
        return default
    try:
        s = float(v)
    except ValueError:
        try:
            s = email.utils.parsedate_to_datetime(v).timestamp() - time.time()
        except (TypeError, ValueError):
            return default
    return min(RETRY_AFTER_MAX_S, max(0.0, s))
