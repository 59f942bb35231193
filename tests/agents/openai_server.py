"""A scripted OpenAI-compatible chat-completions server on loopback, for tests.

The adapter is tested over real HTTP through the real SDK, so retries,
Retry-After, chunked SSE and dropped connections behave as they do against a
real endpoint. Tests enqueue one scripted response per expected request; a
request that finds the script empty gets a 400 naming the problem, so a test
that makes more calls than it planned fails loudly instead of hanging.

Streams are sent with chunked transfer encoding, as real servers do, so that
closing the connection mid-stream is a protocol error the client can see
rather than an ordinary end of body.

``dialect`` switches on the habits of servers written by others:

- ``"openai"`` (default): as OpenAI's API streams.
- ``"llama.cpp"``: as llama-cpp-python's server: every tool-call delta repeats
  the call's ``id`` and ``function.name``; no usage in streams even when asked;
  a 500 to an assistant message with tool calls and ``content: null``.
- ``"litellm"``: as LiteLLM's proxy: no ``finish_reason`` key on non-final
  chunks, usage on the finishing chunk itself, errors with ``type: null``.
- ``"ollama"``: as Ollama's: every tool call of an answer streamed with
  ``index`` 0, told apart only by its ``id`` (and its name, sent with it).
- ``"poolside"``: as Poolside's: the deltas after a tool call's first carry
  an ``id`` other than the first's, and no name.
- ``"azure"``: as Azure OpenAI's (in some of its versions): a content-filter
  chunk with ``"delta": null`` in the middle of the answer, and the finishing
  chunk carries ``"delta": null`` instead of an empty delta.
- ``"choices-null"``: as some gateways in front of other vendors' models: the
  usage chunk says ``"choices": null`` instead of an empty list.
- ``"arguments-object"``: as Hugging Face TGI's and llama.cpp's server with
  ``--tool-args-object``: a tool call's arguments sent as a JSON object, whole,
  not as JSON text.
- ``"numbered-chunks"``: as Microsoft's Foundry Local (and Hugging Face TGI
  before 1.4.4): the one choice's ``index`` counts the chunks (0, 1, 2...).
- ``"no-choice-index"``: as one-api's gateway did: no ``index`` on the choice.
- ``"content-parts"``: as Databricks' gpt-oss endpoints: ``delta.content`` is a
  list of parts, ``{"type": "text", "text": ...}`` for the answer and a
  ``{"type": "reasoning", ...}`` part for the model's reasoning.
- ``"whole-json"``: as a server or gateway that ignores ``stream`` (or buffers the
  stream away): every answer is one whole ``chat.completion`` as
  ``application/json``, never a stream.
- ``"gemini"``: as Google's OpenAI-compatible endpoint (and Ollama's older
  ones): tool-call deltas carry no ``index`` at all; each call comes whole,
  its id, name and arguments in one delta.
- ``"same-id"``: as DeepSeek's and Zhipu GLM's endpoints are reported to do
  (HKUDS/nanobot#3943): the parallel calls of an answer, each under its own
  ``index``, all carry the same ``id``.
"""

from __future__ import annotations

import contextlib
import json
import re
import select
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_COMPLETIONS_PATH = "/v1/chat/completions"
# What the ``content-parts`` dialect streams as the model's reasoning (never the customer's to read).
REASONING = "The customer wants the status; I should check before answering."


def split_text(text: str) -> list[str]:
    """The pieces a text is streamed in: one word with its trailing space per chunk."""
    return re.findall(r"\S+\s*|\s+", text)


def split_arguments(arguments: str, size: int = 7) -> list[str]:
    """Tool-call argument JSON cut into pieces that are not valid JSON on their own."""
    return [arguments[i : i + size] for i in range(0, len(arguments), size)] or [""]


@dataclass
class _Text:
    text: str
    prompt_tokens: int
    completion_tokens: int | None


@dataclass
class _ToolCalls:
    calls: list[tuple[str, str, str]]  # (id, name, arguments JSON)
    text: str
    prompt_tokens: int
    completion_tokens: int | None


@dataclass
class _Error:
    status: int
    message: str
    retry_after: float | None


@dataclass
class _Drop:
    partial_text: str


@dataclass
class _Truncated:
    partial_text: str


@dataclass
class _Stall:
    partial_text: str
    seconds: float


@dataclass
class _ErrorInStream:
    partial_text: str
    error: dict[str, Any]


@dataclass
class _ErrorWith200:
    error: dict[str, Any]


@dataclass
class _Page:
    html: str


_Script = _Text | _ToolCalls | _Error | _Drop | _Stall | _Truncated | _ErrorInStream | _ErrorWith200 | _Page


@dataclass
class OpenAIServer:
    """Scripted server; ``url`` is the base URL to give the SDK (ends in /v1)."""

    host: str = "127.0.0.1"
    dialect: str = "openai"
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    # How many stalled streams the client abandoned before the stall ended.
    hangups: int = 0
    _hangup: threading.Condition = field(default_factory=threading.Condition)
    _script: deque[_Script] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _httpd: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    # --- scripting -------------------------------------------------------------

    def enqueue_text(self, text: str, *, prompt_tokens: int = 11, completion_tokens: int | None = None) -> None:
        """Answer the next request with ``text``, streamed as ``split_text(text)``."""
        self._push(_Text(text, prompt_tokens, completion_tokens))

    def enqueue_tool_calls(
        self,
        calls: list[tuple[str, dict[str, Any]]],
        *,
        text: str = "",
        prompt_tokens: int = 11,
        completion_tokens: int | None = None,
    ) -> list[str]:
        """Answer the next request with tool calls; returns the call ids the server will use."""
        scripted = [(f"call_{uuid.uuid4().hex[:24]}", name, json.dumps(args)) for name, args in calls]
        if self.dialect == "same-id":
            scripted = [(scripted[0][0], name, arguments) for _, name, arguments in scripted]
        self._push(_ToolCalls(scripted, text, prompt_tokens, completion_tokens))
        return [call_id for call_id, _, _ in scripted]

    def enqueue_error(self, status: int, *, message: str = "", retry_after: float | None = None) -> None:
        """Answer the next request with an OpenAI-shaped error body and ``status``."""
        self._push(_Error(status, message or f"scripted error {status}", retry_after))

    def enqueue_drop_mid_stream(self, partial_text: str) -> None:
        """Start a stream, send ``partial_text`` in pieces, then close the connection."""
        self._push(_Drop(partial_text))

    def enqueue_truncated_stream(self, partial_text: str) -> None:
        """Send ``partial_text`` and end the stream properly, but without a finish_reason."""
        self._push(_Truncated(partial_text))

    def enqueue_error_mid_stream(self, partial_text: str, error: dict[str, Any]) -> None:
        """Start a stream (HTTP 200), send ``partial_text``, then an event ``{"error": error}`` and end it,
        as OpenRouter reports what went wrong once the answer has begun (its ``code`` the HTTP status
        the error would have had), and OpenAI its ``server_error``."""
        self._push(_ErrorInStream(partial_text, error))

    def enqueue_error_with_200(self, error: dict[str, Any]) -> None:
        """Answer the next request with HTTP 200 and a JSON body ``{"error": error}``, no stream, as
        gateways do that report an upstream's failure in the body (its ``code`` the status it stands for)."""
        self._push(_ErrorWith200(error))

    def enqueue_page(self, html: str) -> None:
        """Answer the next request with HTTP 200 and an HTML page, as a proxy or captive portal in front
        of the model does."""
        self._push(_Page(html))

    def enqueue_stall_mid_stream(self, partial_text: str, *, seconds: float) -> None:
        """Start a stream, send ``partial_text``, then go silent for ``seconds`` and close.

        If the client hangs up during the silence, the stall ends early and
        ``hangups`` counts it.
        """
        self._push(_Stall(partial_text, seconds))

    def _push(self, item: _Script) -> None:
        with self._lock:
            self._script.append(item)

    def _pop(self) -> _Script | None:
        with self._lock:
            return self._script.popleft() if self._script else None

    def wait_for_hangups(self, count: int, *, timeout: float) -> bool:
        """Wait until ``count`` stalled streams were abandoned by the client.

        The client raises as soon as it gives up, possibly before this server's
        thread has noticed the closed socket, so tests wait rather than peek.
        """
        with self._hangup:
            return self._hangup.wait_for(lambda: self.hangups >= count, timeout=timeout)

    def _note_hangup(self) -> None:
        with self._hangup:
            self.hangups += 1
            self._hangup.notify_all()

    @property
    def pending(self) -> int:
        """Scripted responses not yet served."""
        with self._lock:
            return len(self._script)

    # --- lifecycle -------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> OpenAIServer:
        server = self

        class Handler(_Handler):
            owner = server

        # Port 0: the kernel picks a free port, so parallel test runs never collide.
        self._httpd = _QuietServer((self.host, 0), Handler)
        # A short poll interval keeps stop() (which waits for the next poll) fast.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="openai-test-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _record(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A handler of one test's own (a stream the scripted server has no item for) on a free loopback
    port, while the block runs: yields its base URL."""
    httpd = _QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        host, port = httpd.server_address[:2]
        yield f"http://{host}:{port}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up (a timed-out read, a stopped test) are expected here.
        pass


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 for keep-alive and chunked encoding, like a real endpoint.
    protocol_version = "HTTP/1.1"
    owner: OpenAIServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path != CHAT_COMPLETIONS_PATH:
            self._send_error(404, f"no route for {self.path}")
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send_error(400, "request body is not JSON")
            return
        self.owner._record(body, {k.lower(): v for k, v in self.headers.items()})

        if self.owner.dialect == "llama.cpp" and any(
            m.get("role") == "assistant" and m.get("tool_calls") and m.get("content", None) is None
            for m in body.get("messages", [])
        ):
            self._send_error(500, "llama.cpp: content must be a string")
            return
        item = self.owner._pop()
        if item is None:
            self._send_error(400, "openai_server: no scripted response left for this request")
            return
        if isinstance(item, _Error):
            self._send_error(item.status, item.message, retry_after=item.retry_after)
            return
        if isinstance(item, _Drop | _Stall):
            self._stream_then_break(body, item)
            return
        if isinstance(item, _Truncated):
            self._stream_truncated(body, item)
            return
        if isinstance(item, _ErrorInStream):
            self._start_stream()
            for chunk in _Chunks(body, include_usage=False).text_deltas(item.partial_text):
                self._send_event(json.dumps(chunk))
            self._send_event(json.dumps({"error": item.error}))
            self._end_stream()
            return
        if isinstance(item, _Page):
            data = item.html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if isinstance(item, _ErrorWith200):
            self._send_json(200, {"error": item.error})
            return
        if body.get("stream") and self.owner.dialect != "whole-json":
            self._stream(body, item)
        else:
            self._send_json(200, _completion(body, item))

    # --- responses ---------------------------------------------------------------

    def _send_json(self, status: int, payload: dict[str, Any], extra_headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", f"req_{uuid.uuid4().hex[:12]}")
        for name, value in (extra_headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_error(self, status: int, message: str, *, retry_after: float | None = None) -> None:
        error_type = {
            400: "invalid_request_error",
            401: "authentication_error",
            404: "not_found_error",
            429: "rate_limit_exceeded",
        }.get(status, "server_error")
        if self.owner.dialect == "litellm":
            error_type = None
        payload = {"error": {"message": message, "type": error_type, "param": None, "code": None}}
        headers = {} if retry_after is None else {"Retry-After": _format_seconds(retry_after)}
        self._send_json(status, payload, headers)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _send_event(self, data: str) -> None:
        payload = f"data: {data}\n\n".encode()
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _stream(self, body: dict[str, Any], item: _Text | _ToolCalls) -> None:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self._start_stream()
        chunks = _Chunks(body, include_usage, self.owner.dialect)
        for chunk in chunks.for_script(item):
            self._send_event(json.dumps(chunk))
        self._send_event("[DONE]")
        self._end_stream()

    def _stream_truncated(self, body: dict[str, Any], item: _Truncated) -> None:
        self._start_stream()
        for chunk in _Chunks(body, include_usage=False).text_deltas(item.partial_text):
            self._send_event(json.dumps(chunk))
        self._send_event("[DONE]")
        self._end_stream()

    def _stream_then_break(self, body: dict[str, Any], item: _Drop | _Stall) -> None:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self._start_stream()
        chunks = _Chunks(body, include_usage)
        for chunk in chunks.text_deltas(item.partial_text):
            self._send_event(json.dumps(chunk))
        if isinstance(item, _Stall) and self._client_hangs_up_within(item.seconds):
            self.owner._note_hangup()
        # No terminating zero-length chunk: the client sees an incomplete body.
        self.close_connection = True

    def _client_hangs_up_within(self, seconds: float) -> bool:
        # The client has sent its whole request, so the socket turns readable
        # only when it closes the connection (recv returns b"").
        ready, _, _ = select.select([self.connection], [], [], seconds)
        if not ready:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True


class _Chunks:
    """Builds chat.completion.chunk objects sharing one id, timestamp and model."""

    def __init__(self, body: dict[str, Any], include_usage: bool, dialect: str = "openai") -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model = str(body.get("model", ""))
        self.dialect = dialect
        # llama.cpp's server sends no usage in streams, asked or not.
        self.include_usage = include_usage and dialect != "llama.cpp"
        self.sent = 0

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        if self.dialect == "numbered-chunks":  # the one choice numbered as the chunk, not as a choice
            choice["index"] = self.sent
        elif self.dialect == "no-choice-index":
            del choice["index"]
        self.sent += 1
        if self.dialect == "litellm" and finish_reason is None:
            del choice["finish_reason"]
        chunk: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_test",
            "choices": [choice],
        }
        if self.include_usage and self.dialect != "litellm":
            chunk["usage"] = None
        return chunk

    def text_deltas(self, text: str) -> Iterator[dict[str, Any]]:
        yield self.chunk({"role": "assistant", "content": "", "refusal": None})
        if self.dialect == "content-parts":  # the model's reasoning first, as a part of its own
            reasoning = {"type": "reasoning", "summary": [{"type": "summary_text", "text": REASONING}]}
            yield self.chunk({"content": [reasoning]})
        for piece in split_text(text):
            if self.dialect == "content-parts":
                yield self.chunk({"content": [{"type": "text", "text": piece}]})
            else:
                yield self.chunk({"content": piece})

    def for_script(self, item: _Text | _ToolCalls) -> Iterator[dict[str, Any]]:
        yield from self.text_deltas(item.text)
        if self.dialect == "azure":  # its content filter's verdict on the text so far, with no delta
            filtered = self.chunk({})
            filtered["choices"][0].update(delta=None, content_filter_results={"hate": {"filtered": False}})
            yield filtered
        pieces = len(split_text(item.text))
        if isinstance(item, _ToolCalls):
            for n, (call_id, name, arguments) in enumerate(item.calls):
                index = 0 if self.dialect == "ollama" else n
                if self.dialect == "arguments-object":  # the arguments as an object, whole
                    pieces += 1
                    function = {"name": name, "arguments": json.loads(arguments)}
                    yield self.chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                                      "function": function}]})  # fmt: skip
                    continue
                if self.dialect == "gemini":  # no index, the call whole in one delta
                    pieces += 1
                    whole = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
                    yield self.chunk({"tool_calls": [whole]})
                    continue
                yield self.chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call_id,
                                "type": "function",
                                "function": {"name": name, "arguments": ""},
                            }
                        ]
                    }
                )
                for piece in split_arguments(arguments):
                    pieces += 1
                    fragment: dict[str, Any] = {"index": index, "function": {"arguments": piece}}
                    if self.dialect == "llama.cpp":  # the id and the name again, in every delta
                        fragment = {"index": index, "id": call_id, "type": "function",
                                    "function": {"name": name, "arguments": piece}}  # fmt: skip
                    elif self.dialect == "poolside":  # an id of its own on every delta after the first
                        fragment = {"index": index, "id": f"{call_id}-more", "function": {"arguments": piece}}
                    yield self.chunk({"tool_calls": [fragment]})
        finish = "tool_calls" if isinstance(item, _ToolCalls) else "stop"
        completion_tokens = item.completion_tokens if item.completion_tokens is not None else pieces
        if self.dialect == "litellm":
            final = self.chunk({}, finish_reason=finish)
            if self.include_usage:
                final["usage"] = _usage(item.prompt_tokens, completion_tokens)
            yield final
            return
        final = self.chunk({}, finish_reason=finish)
        if self.dialect == "azure":
            final["choices"][0]["delta"] = None
        yield final
        if self.include_usage:
            yield {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "system_fingerprint": "fp_test",
                "choices": None if self.dialect == "choices-null" else [],
                "usage": _usage(item.prompt_tokens, completion_tokens),
            }


def _completion(body: dict[str, Any], item: _Text | _ToolCalls) -> dict[str, Any]:
    """The non-streaming ``chat.completion`` object for a scripted answer."""
    message: dict[str, Any] = {"role": "assistant", "content": item.text or None, "refusal": None}
    finish_reason = "stop"
    if isinstance(item, _ToolCalls):
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            for call_id, name, arguments in item.calls
        ]
        finish_reason = "tool_calls"
    completion_tokens = item.completion_tokens if item.completion_tokens is not None else len(split_text(item.text))
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model", "")),
        "system_fingerprint": "fp_test",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        "usage": _usage(item.prompt_tokens, completion_tokens),
    }


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _format_seconds(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)
