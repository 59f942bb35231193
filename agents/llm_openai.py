"""ChatModel over the official ``openai`` SDK, for any OpenAI-compatible endpoint.

The adapter always streams: the customer sees text as it is generated, and a
stream that breaks is visible as a break (an exception) rather than as a
short answer. Transport retries (429, 5xx, connection failures before the
response starts) are left to the SDK, which backs off and honours
``Retry-After``; whatever survives those retries becomes a ``ModelError`` whose
``retryable`` flag tells the agent loop whether ringing the doorbell again
later may help.

A failure after the stream has started is never retried here: text may
already have reached the customer through ``on_token``, and the loop has to
decide (and meter the wasted tokens) before generating again.
"""

from __future__ import annotations

import email.utils
import inspect
import json
import numbers
import re
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpcore2
import httpx
import httpx2
import openai
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from openai.resources.chat.completions import Completions
from openai.types.chat import ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall

from agents.llm import (
    OWN_REQUEST_KEYS,
    Message,
    ModelError,
    ModelOutputInvalid,
    ModelResponse,
    StreamMeter,
    TokenCallback,
    ToolCallRequest,
    ToolSpec,
    Usage,
    estimate_tokens,
    plausible_tokens,
    reply_chars,
    wasted_tokens,
)

# The SDK refuses to build a client without credentials. Local endpoints
# (vLLM, Ollama, llama.cpp, the test server) accept any bearer token, so we
# send an obviously fake one rather than reading OPENAI_API_KEY behind the
# settings' back.
_NO_API_KEY = "no-api-key"

# What a profile version's model parameters may be: keys the SDK's request takes (a name it does not know
# is refused by the SDK before anything is sent, on every request), in the ranges the chat completions
# API sets (a value outside is refused by every compatible endpoint, on every request).
_SDK_REQUEST_KEYS = frozenset(inspect.signature(Completions.create).parameters) - {"self"}
_IN_RANGE = {"temperature": (0, 2), "top_p": (0, 1), "presence_penalty": (-2, 2), "frequency_penalty": (-2, 2)}
_COUNTS = ("max_tokens", "max_completion_tokens")  # whole numbers, at least 1


def parameters_problems(parameters: dict[str, Any]) -> list[str]:
    """What no request may carry among a profile version's model parameters, in words for an operator
    ([] when each can be sent). The request's own keys (``OWN_REQUEST_KEYS``) are the caller's to refuse."""
    problems = []
    if "timeout" in parameters:
        # The adapter's own: it bounds each read of the stream, and the step's deadline is set apart.
        problems.append(
            "timeout: set by the agent itself (each read of the answer is bounded, the whole step by "
            "AGENT_MODEL_STEP_SECONDS), not a model parameter"
        )
    unknown = sorted(set(parameters) - _SDK_REQUEST_KEYS - OWN_REQUEST_KEYS - {"timeout"})
    if unknown:
        problems.append(
            f"not a parameter of an OpenAI-compatible request: {', '.join(unknown)}; a server's own parameter goes "
            f'under extra_body, e.g. {{"extra_body": {{"{unknown[0]}": ...}}}}'
        )
    for name, (low, high) in _IN_RANGE.items():
        value = parameters.get(name)
        if name in parameters and not (_number(value) and low <= value <= high):
            problems.append(f"{name}: {value!r} is not a number from {low} to {high}")
    for name in _COUNTS:
        value = parameters.get(name)
        if name in parameters and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            problems.append(f"{name}: {value!r} is not a whole number of tokens, at least 1")
    if "n" in parameters and (parameters["n"] != 1 or isinstance(parameters["n"], bool)):
        # Several answers to one request: the agent reads one, and would mix their words and tool calls.
        problems.append(f"n: {parameters['n']!r}; the agent reads one answer per request, so n is 1 or left out")
    body = parameters.get("extra_body")
    if isinstance(body, dict):
        own = sorted(set(body) & (OWN_REQUEST_KEYS | {"n"}))
        if own:
            problems.append(f"extra_body: {', '.join(own)} set by the agent itself, not a model parameter")
    return problems


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


# Statuses the SDK itself retries (see openai._base_client.SyncAPIClient._should_retry):
# if they are still failing after its retries, a later attempt may still succeed.
_RETRYABLE_STATUSES = frozenset({408, 409, 429})


@dataclass
class _ToolCallParts:
    """Pieces of one streamed tool call, keyed in the stream by its ``index`` (and by its id where a
    server, Ollama's, streams every call of an answer under index 0).

    The id and the name come whole, once; some servers (llama.cpp's) repeat them
    in every delta of the call, so only the first is kept. Only the argument
    text arrives in fragments to be joined.
    """

    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    length: int = 0  # characters in ``arguments``
    number: int = 0  # the call's place in the answer, from 1

    def build(self) -> ToolCallRequest:
        # Some compatible servers omit the id; the loop needs one to pair the
        # tool result with the call, and the step is stored once, so a random
        # id is stable from then on.
        call_id = self.id or f"call_{uuid.uuid4().hex}"
        # A tool without parameters may come back with no argument text at
        # all; "{}" is the JSON the model meant.
        arguments = "".join(self.arguments) or "{}"
        return ToolCallRequest(id=call_id, name=self.name, arguments=arguments)


def _another_call(parts: _ToolCallParts, call_id: str | None, function: Any) -> bool:
    """Does a delta that names a call, under the index of ``parts``, begin another call?

    With ids on both, another id says so. Without (a server that sends none, under one index as
    Ollama does), a name after arguments that are already a whole JSON object does: the call before
    is complete. A server that repeats the call's name in every delta (llama.cpp's) repeats it with
    the rest of the same arguments, which are not whole until the end; a last delta repeating only
    the name, with no arguments, adds none.
    """
    if call_id and parts.id:
        return call_id != parts.id
    if not parts.name or not parts.arguments:
        return False
    if not function.arguments and function.name == parts.name:
        return False
    try:
        return isinstance(json.loads("".join(parts.arguments)), dict)
    except (ValueError, RecursionError):
        return False


class OpenAIChatModel:
    """A ChatModel backed by ``chat.completions.create(stream=True)``.

    One instance holds one SDK client (and its connection pool); it is safe to
    reuse across calls from one thread.
    """

    #: Its calls end at the step's deadline by themselves (``_StepBoundTransport``): the pass calls it
    #: in its own thread (``agents.llm.complete_within_step``).
    bounds_its_own_step = True

    def __init__(
        self,
        *,
        model: str,
        api_key: str | None,
        base_url: str | None,
        timeout: float = 60.0,
        max_retries: int = 3,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.name = f"openai:{model}"
        # A profile version's model parameters, sent with every request (never over the request's own keys).
        self.parameters = {k: v for k, v in (parameters or {}).items() if k not in OWN_REQUEST_KEYS}
        problems = parameters_problems(self.parameters)
        if problems:
            raise ImproperlyConfigured(f"{self.name}: model parameters no request can carry: {'; '.join(problems)}")
        # ``timeout`` bounds each network operation, so during a stream it is
        # the longest silence tolerated between two chunks, not the length of
        # the whole generation.
        self._client = openai.OpenAI(
            api_key=api_key or _NO_API_KEY,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            http_client=openai.DefaultHttpxClient(transport=_StepBoundTransport()),
        )

    def complete(
        self,
        *,
        messages: list[Message],
        tools: list[ToolSpec],
        on_token: TokenCallback | None = None,
    ) -> ModelResponse:
        """Stream one completion and assemble it.

        Raises ModelError when the endpoint refuses or the stream breaks.
        Exceptions raised by ``on_token`` propagate unchanged: they are the
        caller's, not the model's.
        """
        request: dict[str, Any] = {
            **self.parameters,
            "model": self.model,
            "messages": [_compatible(message) for message in messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            # Some compatible servers reject an empty tools list.
            request["tools"] = tools
        max_tokens = getattr(settings, "AGENT_MAX_OUTPUT_TOKENS", 0)
        if max_tokens and "max_tokens" not in request:  # a profile version's own limit comes first
            # The server stops generating there itself; the meter below stops reading either way.
            request["max_tokens"] = max_tokens
        meter = StreamMeter(prompt_tokens=lambda: estimate_tokens(json.dumps(request["messages"], default=str)))
        _step_deadline.at = meter.deadline
        try:
            return self._complete(request, on_token, meter)
        finally:
            _step_deadline.at = None

    def _complete(self, request: dict[str, Any], on_token: TokenCallback | None, meter: StreamMeter) -> ModelResponse:
        try:
            stream = self._client.chat.completions.create(**request)
        except openai.APIStatusError as exc:
            raise ModelError(
                f"{self.name}: {exc.message}",
                retryable=_is_retryable_status(exc.status_code),
                status_code=exc.status_code,
                retry_after=_retry_after(exc.response),
            ) from exc
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            meter.check_time()  # the step's deadline cut it (a connect or headers that never end)
            raise ModelError(f"{self.name}: {exc.message}", retryable=True, unreachable=True) from exc
        except openai.OpenAIError as exc:
            # Anything else the SDK raises before a response exists is about
            # our request or configuration; repeating it will not help.
            raise ModelError(f"{self.name}: {exc}", retryable=False) from exc

        try:
            with stream:
                if _answered_with_a_page(stream.response):
                    raise ModelError(
                        f"{self.name}: the endpoint answered with a web page, not the model's API "
                        "(a proxy's or gateway's error page?)",
                        retryable=True,
                        unreachable=True,
                    )
                whole = _answered_whole(stream.response)
                chunks = _whole_answer(self.name, stream.response, meter) if whole else stream
                return self._assemble(chunks, on_token, request["messages"], meter, tools_offered="tools" in request)
        except _CallerRaised as raised:
            raise raised.original from None  # the caller's own, unchanged
        except ModelError:
            raise  # the meter stopped an answer past a limit; closing the stream hung up on it
        except openai.OpenAIError as exc:
            # The connection dropped, timed out, or the server sent an error
            # event after the response had started; a new generation may well
            # succeed.
            meter.check_time()  # the step's deadline cut it (only keep-alive comments, no chunk)
            status_code = getattr(exc, "status_code", None)
            if status_code is None:
                # An error event in a stream begun with 200: the status it would have had, from its body.
                status_code = _status_of_error_event(getattr(exc, "body", None))
            raise ModelError(
                f"{self.name}: stream interrupted: {exc}",
                retryable=status_code is None or _is_retryable_status(status_code),
                status_code=status_code,
                unreachable=isinstance(exc, openai.APIConnectionError),  # the connection dropped or timed out
                usage=_generated(meter),
            ) from exc
        except Exception as exc:
            # A chunk that could not be read (not JSON: a proxy cut a line; a shape the SDK or
            # this adapter does not expect): like a cut stream, a new generation may succeed.
            raise ModelError(
                f"{self.name}: unreadable stream: {exc!r}", retryable=True, usage=_generated(meter)
            ) from exc

    def _assemble(
        self,
        stream: Iterable[ChatCompletionChunk],
        on_token: TokenCallback | None,
        messages: list[Message],
        meter: StreamMeter,
        *,
        tools_offered: bool,
    ) -> ModelResponse:
        text_parts: list[str] = []
        # Each call with the stream index it came under, in the order the calls began; ``open_at`` holds the
        # call that index's deltas add to now.
        calls: list[tuple[int | None, _ToolCallParts]] = []
        open_at: dict[int | None, _ToolCallParts] = {}
        usage = Usage()
        model = self.model
        finish_reason: str | None = None

        reported = False
        turn = _TurnEnd()
        thinking = _Thinking(meter, hold_unopened=settings.AGENT_MODEL_REASONING_UNOPENED)
        written = _CallsWritten(tools_offered=tools_offered)
        ended: list[str] = []  # the answer's finish_reason, once it has one
        for chunk in _until_cut_after_the_finish(stream, ended):
            meter.check_time()
            if chunk.model:
                model = chunk.model
            if chunk.usage is not None and all(
                plausible_tokens(count or 0) for count in (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
            ):
                reported = True
                usage = Usage(
                    prompt_tokens=chunk.usage.prompt_tokens or 0,
                    completion_tokens=chunk.usage.completion_tokens or 0,
                )
            choices = chunk.choices or ()  # null on some gateways' usage chunk, where others send []
            for choice in choices:
                # We never ask for n > 1: a chunk's one choice is the answer's, whatever it is numbered
                # (Foundry Local numbers it as the chunk, 0, 1, 2...; some gateways leave the number out).
                if len(choices) > 1 and choice.index not in (0, None):
                    continue
                if choice.finish_reason is not None:
                    finish_reason = choice.finish_reason
                    ended.append(finish_reason)
                delta = choice.delta
                if delta is None:
                    continue  # Azure's finishing chunk says "delta": null where others send {}
                # A refusal is what the model says instead of an answer; the
                # customer should see it like any other text. The model's reasoning written into the
                # text (``<think>...</think>``) is not: it is counted as generated, and left out.
                if _reasoning_apart(delta):
                    thinking.reasoning_apart()
                content = written.text(thinking.answer(turn.text(_answer_text(delta.content))))
                meter.generated += turn.taken() + thinking.taken() + written.taken()
                written.check(meter)
                for piece in (content, _answer_text(delta.refusal)):
                    if piece:
                        meter.add_text(piece)  # before the customer sees it
                        text_parts.append(piece)
                        if on_token is not None:
                            try:
                                on_token(piece)
                            except BaseException as exc:
                                raise _CallerRaised(exc) from exc
                for call in _tool_call_deltas(delta):
                    parts = open_at.get(call.index)
                    begins = bool(call.function and call.function.name)  # a call's first delta names it
                    if parts is None or (begins and _another_call(parts, call.id, call.function)):
                        # Another call named under an index in use is another call: Ollama streams every
                        # call of an answer under index 0. Joined, two refunds would be one call of both
                        # arguments. (Poolside gives a call's later deltas, unnamed, an id of their own.)
                        parts = open_at[call.index] = _ToolCallParts(number=len(calls) + 1)
                        calls.append((call.index, parts))
                    meter.add_call(len(calls))
                    if call.id and not parts.id:
                        parts.id = call.id
                    if call.function is not None:
                        if call.function.name and not parts.name:
                            parts.name = call.function.name
                        arguments = call.function.arguments
                        if isinstance(arguments, dict | list):
                            # Sent as a JSON object, whole, not as its text (Hugging Face TGI's server,
                            # llama.cpp's with --tool-args-object): the text the model meant.
                            arguments = json.dumps(arguments)
                        if arguments:
                            parts.arguments.append(arguments)
                            parts.length += len(arguments)
                            meter.add_arguments(parts.number, arguments, parts.length)

        rest = written.text(thinking.answer(turn.end()) + thinking.end()) + written.end()
        meter.generated += turn.taken() + thinking.taken() + written.taken()
        if rest:
            # Text held back while it might have been the model's reasoning: the answer's after all.
            meter.add_text(rest)
            text_parts.append(rest)
            if on_token is not None:
                try:
                    on_token(rest)
                except BaseException as exc:
                    raise _CallerRaised(exc) from exc
        if finish_reason is None:
            # The server closed the stream cleanly but before the model said it
            # was done: the answer is truncated, not short.
            raise ModelError(f"{self.name}: stream ended before a finish_reason", retryable=True)

        text = thinking.without_reasoning_before("".join(text_parts))
        # By index, stable: in the order begun among calls of one index, and wholly so for a server that
        # sends no index at all (Google's OpenAI-compatible endpoint: each call whole in one delta).
        in_order = sorted(calls, key=lambda call: -1 if call[0] is None else call[0])
        tool_calls = [parts.build() for _, parts in in_order]
        for parts in written.calls(meter, first=len(calls) + 1):
            tool_calls.append(parts.build())
        if not reported:
            # The server sent no usage (llama.cpp, even when asked): estimate it, so the
            # token budget still advances, and say so on the step.
            generated = text + "".join(call.name + call.arguments for call in tool_calls)
            usage = Usage(
                prompt_tokens=estimate_tokens(json.dumps(messages, default=str)),
                completion_tokens=estimate_tokens(generated),
                estimated=True,
            )
        return ModelResponse(text=text, tool_calls=tool_calls, usage=usage, model=model, finish_reason=finish_reason)


# The stream index given to a call in the older functions API's shape (``delta.function_call``): apart
# from every index a server gives its tool calls, and before them.
_FUNCTION_CALL_INDEX = -1


def _tool_call_deltas(delta: Any) -> list[Any]:
    """The tool-call deltas of ``delta``, with a ``function_call`` in the older functions API's shape (as
    OpenAI's API answered before tools, and some compatible servers still do) as one of them: read as
    nothing, the answer had neither text nor call and failed every time."""
    deltas = list(delta.tool_calls or ())
    function = getattr(delta, "function_call", None)
    if function is not None:
        deltas.append(ChoiceDeltaToolCall.construct(index=_FUNCTION_CALL_INDEX, id=None, function=function))
    return deltas


def _generated(meter: StreamMeter) -> Usage | None:
    """The tokens a generation cut off had generated, shown to the customer or not (text held back
    until it is known not to be reasoning is wasted too), or None if it had generated nothing."""
    return Usage(0, wasted_tokens(meter.generated), estimated=True) if meter.generated else None


def _until_cut_after_the_finish(
    stream: Iterable[ChatCompletionChunk], ended: list[str]
) -> Iterator[ChatCompletionChunk]:
    """The stream's chunks; a connection cut once the answer has its finish_reason ends them. A proxy
    or gateway that closes the connection when the upstream is done (or on an idle timeout before the
    last chunks) cuts only the usage chunk and ``[DONE]``: the answer is whole. Read as a broken stream,
    the answer the customer had watched stream in was dropped and generated again, its tokens wasted.
    (Its usage, never sent, is estimated.) A cut before the finish_reason is a broken stream."""
    chunks = iter(stream)
    while True:
        try:
            chunk = next(chunks)
        except StopIteration:
            return
        except (httpx2.TransportError, openai.APIConnectionError):
            if ended:
                return
            raise
        yield chunk


class _StepDeadline(threading.local):
    """When the model step under way in this thread must be over (``StreamMeter.deadline``)."""

    at: float | None = None


_step_deadline = _StepDeadline()


def _within_step(timeout: float | None) -> float | None:
    """A socket operation's timeout, cut to what is left of the step. The meter sees chunks only:
    a server that sends nothing else than keep-alive comments (``: ping``, as proxies do while an
    upstream model queues), or its headers a byte at a time, never hands it one, and kept the worker
    (and the ticket) until the task's time limit, or forever under a pool without one."""
    if _step_deadline.at is None:
        return timeout
    left = _step_deadline.at - time.monotonic()
    if left <= 0:
        raise httpcore2.ReadTimeout("the model step's time (AGENT_MODEL_STEP_SECONDS) is over")
    return left if timeout is None else min(timeout, left)


class _StepBoundStream(httpcore2.NetworkStream):
    """A connection to the model whose every read and write ends with the step (``_within_step``)."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _within_step(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _within_step(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore2.NetworkStream:
        return _StepBoundStream(self._inner.start_tls(ssl_context, server_hostname, _within_step(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _StepBoundBackend(httpcore2.NetworkBackend):
    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        stream = self._inner.connect_tcp(host, port, _within_step(timeout), local_address, socket_options)
        return _StepBoundStream(stream)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.NetworkStream:
        return _StepBoundStream(self._inner.connect_unix_socket(path, _within_step(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _StepBoundTransport(httpx2.HTTPTransport):
    """The SDK's transport over connections bounded by the step (httpx's own timeouts bound each
    read, never the whole answer). The pool takes its backend as it opens each connection."""

    def __init__(self) -> None:
        super().__init__()
        self._pool._network_backend = _StepBoundBackend(self._pool._network_backend)


class _CallerRaised(Exception):
    """What ``on_token`` raised, carried out of the stream unchanged."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(repr(original))
        self.original = original


class _TurnEnd:
    """The answer's text up to the model's end-of-turn token, if the server sends one.

    A server whose stop list lacks the chat template's end-of-turn token, or that does not strip it
    (``skip_special_tokens`` off), sends it in ``content``: ``<|im_end|>`` (ChatML: Qwen, Hermes),
    ``<|eot_id|>`` (Llama 3), ``</s>`` (Mistral), often with a turn the model goes on to write as the
    customer after it. Text is held back only while it may be the start of such a token; from the
    token on, nothing is the answer.
    """

    _TOKENS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<|end_of_text|>", "</s>")

    def __init__(self) -> None:
        self._pending = ""  # text that may be the start of a token
        self._ended = False
        self._taken = 0

    def taken(self) -> int:
        """Characters past the end of the turn left out since the last call."""
        taken, self._taken = self._taken, 0
        return taken

    def text(self, piece: str) -> str:
        """The part of ``piece`` (with text held back before it) before the end of the turn."""
        if self._ended:
            self._taken += len(piece)
            return ""
        pending = self._pending + piece
        found = [at for token in self._TOKENS if (at := pending.find(token)) >= 0]
        if found:
            self._ended, self._pending = True, ""
            self._taken += len(pending) - min(found)
            return pending[: min(found)]
        keep = max(
            (k for token in self._TOKENS for k in range(len(token) - 1, 0, -1) if pending.endswith(token[:k])),
            default=0,
        )
        self._pending = pending[len(pending) - keep :]
        return pending[: len(pending) - keep]

    def end(self) -> str:
        """Text held back that never became a token: the answer's."""
        pending, self._pending = self._pending, ""
        return pending


class _Thinking:
    """The model's reasoning written at the head of its text, taken out of the answer as it streams.

    Reasoning models served without a reasoning parser (DeepSeek-R1 and Qwen3 behind vLLM, SGLang,
    llama.cpp's server or Ollama's older versions) write their thinking into ``content`` itself, as
    ``<think>...</think>`` before the answer: streamed and posted as it came, the customer read the
    model's private deliberation about them. The chat template of some (DeepSeek-R1's distilled models)
    opens ``<think>`` in the prompt, and some servers strip the opening tag: the text then begins with
    the reasoning itself, told apart only by the closing tag at its end. For such a model
    (``AGENT_MODEL_REASONING_UNOPENED``) text that does not open with the tag is held back until it is
    known not to be reasoning: the answer ends without a closing tag. Held text is bounded by the longest
    reply (AGENT_MAX_REPLY_CHARS): past it with no closing tag, the answer is refused as one shown as it
    streams would be. For any other model the answer streams as it is written, word by word (holding it
    back whole until its end would cost every answer its streaming); reasoning before a closing tag
    with no opening one then reaches the page before the tag tells it apart, and the reply posted and
    stored is the answer after it (``without_reasoning_before``). What follows the closing tag (less its
    leading blank) is the answer.
    """

    _OPEN = ("<think>", "<thinking>", "<reasoning>")
    _CLOSE_UNOPENED = ("</think>", "</thinking>")

    def __init__(self, meter: StreamMeter, *, hold_unopened: bool = False) -> None:
        # start: nothing decided yet; unopened: no opening tag, may be reasoning until a closing tag or the
        # end; inside: in the reasoning; after: past it, before the answer's first word; answer: the rest,
        # passed on as it comes.
        self._state = "start"
        self._held = ""  # text held back: a possible opening tag, the reasoning read so far, or text unsure
        self._close = ""
        self._meter = meter
        self._scanned = 0  # of the text held unsure, how much is known to hold no closing tag
        self._apart = False  # the server sends the reasoning apart from the text
        self._hold_unopened = hold_unopened  # text with no opening tag may be reasoning: hold it back
        self._opened = False  # reasoning opened with its tag (taken out as it streamed)
        self._taken = 0

    def reasoning_apart(self) -> None:
        """The server sent reasoning in a field of its own (a server with a reasoning parser): text that
        does not open with a tag is the answer, streamed as it comes."""
        self._apart = True

    def taken(self) -> int:
        """Characters of reasoning left out since the last call."""
        taken, self._taken = self._taken, 0
        return taken

    def answer(self, piece: str) -> str:
        """The part of ``piece`` that is the answer's text (held back text included once decided)."""
        if not piece:
            return piece
        if self._state == "after":  # the blank between the reasoning and the answer is neither's
            piece = piece.lstrip()
            if not piece:
                return ""
            self._state = "answer"
        if self._state == "answer":
            return self._answering(piece)
        self._held += piece
        if self._state == "start":
            head = self._held.lstrip()
            opened = next((tag for tag in self._OPEN if head.lower().startswith(tag)), None)
            if opened is None:
                if not head or any(tag.startswith(head.lower()) for tag in self._OPEN):
                    return ""  # may still be the opening tag: wait for more
                if self._apart or not self._hold_unopened:  # the answer, streamed as it comes
                    self._state, held, self._held = "answer", self._held, ""
                    return self._answering(held)
                self._state = "unopened"
            else:
                self._state, self._opened = "inside", True
                self._close = "</" + opened[1:]
                self._taken += len(self._held) - len(head) + len(opened)
                self._held = head[len(opened) :]
        if self._state == "unopened":
            self._taken += len(piece)  # generated, shown to no one yet (given back if it is the answer)
            return self._unopened()
        return self._inside()

    def _answering(self, piece: str) -> str:
        """The answer's text, passed on as it comes, but for reasoning opened mid-answer ("Sure.
        <think>...</think> Your order..."), taken out from its tag, and a tail that may be the start of
        such a tag, held until the next piece tells."""
        held = self._held + piece
        lowered = held.lower()
        found = [(at, tag) for tag in self._OPEN if (at := lowered.find(tag)) >= 0]
        if found:
            at, tag = min(found)
            self._state, self._opened = "inside", True
            self._close = "</" + tag[1:]
            self._taken += len(tag)
            self._held = held[at + len(tag) :]
            return held[:at] + self._inside()
        longest = max(map(len, self._OPEN)) - 1
        keep = next(
            (k for k in range(min(len(held), longest), 0, -1) if any(t.startswith(lowered[-k:]) for t in self._OPEN)),
            0,
        )
        self._held = held[len(held) - keep :]
        return held[: len(held) - keep]

    def _inside(self) -> str:
        """Inside the reasoning: it ends at the closing tag; the rest of the text is the answer."""
        end = self._held.lower().find(self._close)
        if end < 0:
            keep = len(self._close) - 1  # the closing tag may be split over two pieces
            self._taken += max(0, len(self._held) - keep)
            self._held = self._held[-keep:] if len(self._held) > keep else self._held
            return ""
        return self._after_reasoning(end + len(self._close))

    def _unopened(self) -> str:
        """Text with no opening tag, held back: reasoning up to a closing tag, if one comes."""
        unseen = self._held[self._scanned :].lower()
        found = [(at, tag) for tag in self._CLOSE_UNOPENED if (at := unseen.find(tag)) >= 0]
        if found:
            at, tag = min(found)
            self._taken -= len(self._held)  # counted as it came
            end = self._scanned + at
            opened = self._held.lower().rfind(tag.replace("/", ""), 0, end)
            # Reasoning opened after words of the answer: the words before it are the answer's.
            before = self._held[:opened] if opened > 0 else ""
            self._held = self._held[len(before) :]
            return before + self._after_reasoning(end - len(before) + len(tag))
        if reply_chars(self._held) > self._meter.max_reply:
            # Longer than any reply may be, and no end of reasoning in it: an answer that would be refused
            # (a model repeating itself), stopped here as the meter stops a reply shown as it streams.
            raise ModelOutputInvalid(
                f"the reply passed {self._meter.max_reply} characters while streaming; stopped there",
                usage=Usage(self._meter.prompt_tokens(), wasted_tokens(self._meter.generated + self.taken())),
            )
        self._scanned = max(0, len(self._held) - max(map(len, self._CLOSE_UNOPENED)) + 1)  # a tag split in two
        return ""

    def _after_reasoning(self, end: int) -> str:
        """The answer's text after reasoning that ends at ``end`` of the held text."""
        self._taken += end
        text = self._held[end:].lstrip()
        self._held = ""
        if not text:
            self._state = "after"
            return ""
        self._state = "answer"
        return self._answering(text)

    def without_reasoning_before(self, text: str) -> str:
        """The answer without reasoning before a closing tag whose opening was never seen, when it was
        not held back (``hold_unopened`` off, or the server sent reasoning apart and wrote more into the
        text): it streamed before the tag could tell it apart (the page replaces it with the reply); the
        reply posted and stored is the answer after the last closing tag."""
        if self._opened or (self._hold_unopened and not self._apart):
            return text
        lowered = text.lower()
        close = next((tag for tag in self._CLOSE_UNOPENED if tag in lowered), None)
        if close is None:
            return text
        end = lowered.rindex(close)
        opened = lowered.rfind(close.replace("/", ""), 0, end)
        # Reasoning opened after words of the answer: the words before it are the answer's.
        before = text[:opened] if opened > 0 else ""
        return before + text[end + len(close) :].lstrip()

    def end(self) -> str:
        """At the end of the answer: text held back that never became reasoning is the answer's;
        reasoning never closed is left out with the rest of it."""
        held, self._held = self._held, ""
        if self._state == "unopened":
            self._taken -= len(held)  # counted as it came; the answer's after all
        if self._state in ("start", "unopened", "answer"):  # (answer: a tail that never became a tag)
            self._state = "answer"
            return held
        if self._state == "inside":
            self._taken += len(held)
        return ""


class _CallsWritten:
    """Tool calls the model wrote into its text, taken out of the answer as it streams.

    A model served without the server's tool parser (vLLM without ``--enable-auto-tool-choice``, a bare
    llama.cpp or TGI) writes a call as its chat template does, in ``content``: Qwen's and Hermes'
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, Mistral's ``[TOOL_CALLS][{"name": ...,
    "arguments": {...}}]`` (or ``[TOOL_CALLS]name[ARGS]{...}``), Llama 3.x's ``<|python_tag|>{"name": ...,
    "parameters": {...}}`` or that JSON object as the whole message. Streamed and posted as it came, the
    customer read the raw call, and nothing was run. Text is held back only while it may be an opening
    tag (or, when tools were offered, while the message is a JSON object from its first character); from
    the tag on, the rest of the answer is the calls, read at its end. A whole message of JSON that is not
    a call is the answer after all.
    """

    _TAGS = ("<tool_call>", "[TOOL_CALLS]", "<|python_tag|>")
    _CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|(?=<tool_call>)|\Z)", re.S)
    # Llama's end-of-message tokens, written after its call by servers that do not strip them.
    _LLAMA_ENDS = re.compile(r"<\|(?:eom_id|eot_id|eom|end_of_text)\|>")
    _MISTRAL_ARGS = re.compile(r"\s*([^\s\[\]{}]+)(?:\[CALL_ID\]\S*?)?\[ARGS\](.*)", re.S)

    def __init__(self, *, tools_offered: bool) -> None:
        self._pending = ""  # text that may be the start of a tag (or blanks before a message's first character)
        self._held: str | None = None  # from the tag on
        self._whole_json = tools_offered  # a message that is a JSON object may be a call (Llama's)
        self._first = True  # nothing but blanks read yet
        self._taken = 0

    def taken(self) -> int:
        """Characters of written calls taken out of the text since the last call."""
        taken, self._taken = self._taken, 0
        return taken

    def text(self, piece: str) -> str:
        """The part of ``piece`` (with text held back before it) that is the answer's text."""
        if not piece:
            return ""
        if self._held is not None:
            self._held += piece
            self._taken += len(piece)
            return ""
        pending = self._pending + piece
        if self._first:
            head = pending.lstrip()
            if not head:
                self._pending = pending
                return ""
            self._first = False
            if self._whole_json and head.startswith("{"):
                self._held, self._pending = pending, ""
                self._taken += len(pending)
                return ""
        found = [(at, tag) for tag in self._TAGS if (at := pending.find(tag)) >= 0]
        if found:
            at = min(found)[0]
            self._held, self._pending = pending[at:], ""
            self._taken += len(self._held)
            return pending[:at]
        keep = max(
            (k for tag in self._TAGS for k in range(len(tag) - 1, 0, -1) if pending.endswith(tag[:k])), default=0
        )
        self._pending = pending[len(pending) - keep :]
        return pending[: len(pending) - keep]

    def end(self) -> str:
        """Text held back that never became a call: the answer's."""
        pending, self._pending = self._pending, ""
        held = self._held
        if held is not None and not held.startswith(self._TAGS) and self._written_calls(held) is None:
            self._held = None  # a message of JSON, but no call: the answer's text
            self._taken -= len(held)
            return pending + held
        return pending

    def check(self, meter: StreamMeter) -> None:
        """Written calls count against the limits of calls as they stream in."""
        held = len(self._held or "")
        limit = meter.max_calls * (meter.max_arguments + 200)
        if held > limit:
            raise ModelOutputInvalid(
                f"tool calls written into the text passed {limit} characters while streaming; stopped there",
                usage=meter.usage(),
            )

    def calls(self, meter: StreamMeter, *, first: int) -> list[_ToolCallParts]:
        """The calls written, numbered from ``first``; ModelOutputInvalid if one cannot be read (the
        text is a call, not an answer for the customer; another generation may write it well)."""
        if self._held is None:
            return []
        written = self._written_calls(self._held)
        if written is None:
            raise ModelOutputInvalid(
                f"a tool call written into the text could not be read: {self._held.strip()[:200]!r}",
                usage=meter.usage(),
            )
        if not written:
            raise ModelOutputInvalid("the answer holds a tool call tag with no call in it", usage=meter.usage())
        found: list[_ToolCallParts] = []
        for name, arguments in written:
            text = arguments if isinstance(arguments, str) else json.dumps(arguments)
            parts = _ToolCallParts(name=name, arguments=[text], length=len(text), number=first + len(found))
            meter.add_call(parts.number)
            meter.add_arguments(parts.number, text, parts.length)
            found.append(parts)
        return found

    def _written_calls(self, held: str) -> list[tuple[str, Any]] | None:
        """Each call in ``held`` as (name, arguments), or None if any part of it cannot be read as calls."""
        if held.startswith("<tool_call>"):
            bodies = [body for body in self._CALL.findall(held) if body.strip()]
        elif held.startswith("[TOOL_CALLS]"):
            bodies = [body for body in held.split("[TOOL_CALLS]") if body.strip()]
        elif held.startswith("<|python_tag|>"):
            bodies = [self._LLAMA_ENDS.sub("", held[len("<|python_tag|>") :])]
        else:  # a whole message of JSON: a call only if it says so in full (not a reply about a "name")
            values = _json_values(held)
            if not values or not all(isinstance(v, dict) and ("parameters" in v or "arguments" in v) for v in values):
                return None
            bodies = [held]
        calls: list[tuple[str, Any]] = []
        for body in bodies:
            values = _json_values(body)
            if values is None and (named := self._MISTRAL_ARGS.fullmatch(body)):
                values = _json_values(named.group(2))
                values = [{"name": named.group(1), "arguments": values[0]}] if values and len(values) == 1 else None
            if values is None:
                return None
            for value in values:
                for call in value if isinstance(value, list) else [value]:
                    read = _written_call(call)
                    if read is None:
                        return None
                    calls.append(read)
        return calls


def _json_values(text: str) -> list[Any] | None:
    """The JSON values ``text`` holds one after another (apart by blanks, commas or semicolons, as models
    write several calls), or None if it holds anything else."""
    decoder = json.JSONDecoder()
    values, at = [], 0
    while True:
        while at < len(text) and (text[at].isspace() or text[at] in ",;"):
            at += 1
        if at == len(text):
            return values or None
        try:
            value, at = decoder.raw_decode(text, at)
        except (ValueError, RecursionError):
            return None
        values.append(value)


def _written_call(call: object) -> tuple[str, Any] | None:
    """A call as the model wrote it: ``{"name": ..., "arguments": {...}}`` (``parameters`` in Llama's
    words, the arguments as JSON text in some), or None if it is not one."""
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
        return None
    if set(call) - {"name", "arguments", "parameters", "type", "id"}:
        return None  # more than a call: an answer that happens to be JSON
    arguments = call.get("arguments", call.get("parameters", {}))
    if not isinstance(arguments, dict | str):
        return None
    return call["name"], arguments


# Where servers with a reasoning parser send the model's reasoning, apart from ``content`` (vLLM's and
# SGLang's ``reasoning_content``, now ``reasoning``, as DeepSeek's API, OpenRouter and Ollama do).
_REASONING_FIELDS = ("reasoning_content", "reasoning")


def _reasoning_apart(delta: Any) -> bool:
    return any(getattr(delta, name, None) for name in _REASONING_FIELDS)


# The parts of a content list that are the answer's text (not the model's reasoning, nor anything else).
_TEXT_PARTS = frozenset({"text", "output_text"})


def _answer_text(content: object) -> str:
    """The answer's text in a delta's ``content``: a string, as OpenAI sends it, or a list of parts, as
    Databricks' gpt-oss endpoints do (``{"type": "text", "text": ...}``, beside ``{"type": "reasoning"}``
    parts: the model's own thinking, never the customer's to read). Anything else carries no text."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
    return "".join(texts)


def _compatible(message: Message) -> Message:
    """A message every compatible server accepts: an assistant turn with tool calls and no text
    has ``content: ""``, not null (llama.cpp's server answers 500 to null)."""
    if message.get("role") == "assistant" and message.get("content") is None:
        return {**message, "content": ""}
    return message


def _retry_after(response: httpx.Response | None) -> float | None:
    """The server's Retry-After (``retry-after-ms``, or ``retry-after`` in seconds or as a date)."""
    if response is None:
        return None
    headers = response.headers
    try:
        if headers.get("retry-after-ms"):
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        value = headers.get("retry-after")
        if not value:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


# Error types that name what a status would (OpenAI's own ``server_error`` in a stream, others' words
# for an overloaded or throttled upstream).
_STATUS_OF_ERROR_TYPE = {
    "server_error": 500,
    "overloaded_error": 503,
    "service_unavailable": 503,
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
}


def _status_of_error_event(body: object) -> int | None:
    """The HTTP status an error sent inside a stream stands for: a server that has begun its answer
    with 200 reports a failure as an event ``{"error": {...}}``: OpenRouter with the status as its
    ``code`` (502: the upstream model is down, 429: throttled), OpenAI with ``type: "server_error"``.
    Read as the status it names, an upstream down is waited out as an outage (``agents.outage``), and
    a refusal (403: moderation) is not tried again as if transient. None when the event says neither."""
    if not isinstance(body, dict):
        return None
    for key in ("code", "status"):
        value = body.get(key)
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if type(value) is int and 400 <= value <= 599:
            return value
    for key in ("type", "code"):  # OpenRouter's code may be a word too ("server_error")
        kind = body.get(key)
        if isinstance(kind, str) and kind in _STATUS_OF_ERROR_TYPE:
            return _STATUS_OF_ERROR_TYPE[kind]
    return None


def _answered_whole(response: httpx2.Response) -> bool:
    """Did the server answer the streamed request with one JSON body instead of an event stream? Some
    servers and gateways ignore ``stream`` (or buffer the stream away); some report an upstream's
    failure as a 200 with ``{"error": {...}}`` as the whole body. Either read as an empty stream."""
    return response.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json"


def _answered_with_a_page(response: httpx2.Response) -> bool:
    """An HTML page where the API's answer should be: a proxy, gateway or captive portal in front of the
    model answered with its own error page (with 200 too). The model was not reached: an outage."""
    return response.headers.get("content-type", "").split(";")[0].strip().lower() == "text/html"


def _whole_answer(name: str, response: httpx2.Response, meter: StreamMeter) -> list[ChatCompletionChunk]:
    """A whole answer read as the one chunk of a stream: each choice's ``message`` as its ``delta``
    (its tool calls whole, with no index, as Google's endpoint streams them). An ``{"error": ...}``
    body raises as the status it names (``_status_of_error_event``): an upstream down is an outage.
    The body is read up to what the meter's limits allow an answer, escaped (then the meter reads it)."""
    limit = 6 * (meter.max_reply + meter.max_calls * meter.max_arguments) + 65536
    pieces, size = [], 0
    for piece in response.iter_bytes():
        size += len(piece)
        if size > limit:
            raise ModelOutputInvalid(f"the answer passed {limit} bytes, sent whole; stopped there", usage=meter.usage())
        pieces.append(piece)
    body = json.loads(b"".join(pieces))
    if not isinstance(body, dict):
        raise TypeError(f"the answer is a JSON {type(body).__name__}, not an object")
    error = body.get("error")
    if error is not None and not body.get("choices"):
        status = _status_of_error_event(error)
        message = error.get("message") if isinstance(error, dict) else None
        raise ModelError(
            f"{name}: {message if isinstance(message, str) and message else json.dumps(error)[:500]}",
            retryable=status is None or _is_retryable_status(status),
            status_code=status,
        )
    choices = [{**c, "delta": c.get("message")} for c in body.get("choices") or () if isinstance(c, dict)]
    return [ChatCompletionChunk.construct(**{**body, "choices": choices})]


def _is_retryable_status(status_code: int) -> bool:
    """5xx and throttling may pass; any other 4xx means the request itself is wrong."""
    return status_code >= 500 or status_code in _RETRYABLE_STATUSES
