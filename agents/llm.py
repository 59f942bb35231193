"""The one interface every chat model speaks, and the check of what a model answered.

Messages and tools use the OpenAI chat-completions shapes (``role``,
``content``, ``tool_calls``, ``tool_call_id``; tools as
``{"type": "function", "function": {...}}``) so that any OpenAI-compatible
endpoint, the offline deterministic model and a user's own class all fit.

``agents.model_factory.get_model`` builds the adapter that ``AGENT_MODEL`` names.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from django.conf import settings
from django.db import connection

from support.storable import clean_text, shows_something

Message = dict[str, Any]
ToolSpec = dict[str, Any]
# What a request to a model is made of by the adapter itself: a profile version's model parameters
# (temperature, top_p, max_tokens...) are sent beside them, never in their place.
OWN_REQUEST_KEYS = frozenset({"model", "messages", "tools", "tool_choice", "stream", "stream_options"})
# Called with each piece of assistant text as it streams in.
TokenCallback = Callable[[str], None]


@dataclass(frozen=True)
class ToolCallRequest:
    """A tool call the model asked for. ``arguments`` is the raw JSON text the model produced."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # The server reported none; these are estimates (``estimate_tokens``).
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class ModelResponse:
    text: str
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str = "stop"


class ModelError(Exception):
    """The model could not answer. ``retryable`` says whether trying again later may help;
    ``retry_after`` is the server's own word on when (seconds), if it said. ``unreachable``: the
    endpoint could not be reached or dropped the connection (refused, reset, timed out): an outage
    of the model, not an answer about this ticket (``agents.outage``)."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status_code: int | None = None,
        retry_after: float | None = None,
        usage: Usage | None = None,
        unreachable: bool = False,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status_code = status_code
        self.retry_after = retry_after
        self.unreachable = unreachable
        # Tokens spent on an answer that could not be used (counted as wasted).
        self.usage = usage


class ModelOutputInvalid(ModelError):
    """The model answered with something the agent cannot store or act on (poison output)."""

    def __init__(self, message: str, *, usage: Usage | None = None) -> None:
        # Another generation may well differ; the loop counts each one against its budgets.
        super().__init__(message, retryable=True, usage=usage)


def estimate_tokens(text: str) -> int:
    """Tokens in ``text`` when the server reports none: about four characters a token for English
    (OpenAI's rule of thumb), never zero for a non-empty text."""
    return (len(text) + 3) // 4


# More tokens than any model's window takes in one step: a count beyond it (or negative, or not a
# whole number) is a server's mistake, read as unreported. A step's columns hold at most 2**31 - 1,
# and the token budget stops a run long before its sum could pass that.
MOST_TOKENS_PER_STEP = 10_000_000


def plausible_tokens(count: object) -> bool:
    return type(count) is int and 0 <= count <= MOST_TOKENS_PER_STEP


def wasted_tokens(characters: int) -> int:
    """Tokens spent on a generation cut off after ``characters`` were streamed (none if nothing was)."""
    return (characters + 3) // 4


def _limit(name: str, default: int) -> int:
    return int(getattr(settings, name, default))


def _printable_name(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise ModelOutputInvalid(f"{what} is {type(value).__name__}, not a string")
    if not value or len(value) > limit:
        raise ModelOutputInvalid(f"{what} has {len(value)} characters; 1 to {limit} are allowed")
    if clean_text(value) != value or any(ord(ch) < 32 for ch in value):
        raise ModelOutputInvalid(f"{what} contains control characters or invalid Unicode")
    return value


# Finish reasons that say the endpoint stopped the answer before the model finished it.
CUT_OFF = frozenset({"length", "content_filter"})


def validate_response(response: ModelResponse) -> ModelResponse:
    """The adapter boundary: what the model said, made safe to store, or ModelOutputInvalid.

    Limits (settings): AGENT_MAX_REPLY_CHARS, AGENT_MAX_TOOL_CALLS_PER_STEP,
    AGENT_MAX_TOOL_ARGUMENT_CHARS; call ids and tool names at most 100 characters.
    Text loses NUL characters and lone surrogates, and a call id missing or used
    twice is replaced by a fresh one; anything else out of bounds is refused whole,
    so no half of a poison answer is acted on.
    """
    usage = response.usage if isinstance(response.usage, Usage) else Usage()
    if not (plausible_tokens(usage.prompt_tokens) and plausible_tokens(usage.completion_tokens)):
        # Counts no step can hold (a server's bug): estimated from what was generated, as when none
        # are reported, rather than failing the store of a good answer.
        generated = response.text if isinstance(response.text, str) else ""
        for call in response.tool_calls or ():
            generated += str(getattr(call, "name", "")) + str(getattr(call, "arguments", ""))
        usage = Usage(0, estimate_tokens(generated), estimated=True)
    if response.finish_reason in CUT_OFF:
        # Stopped by the token limit or a filter, not by the model: half a sentence, or a tool call's
        # arguments cut short, is not an answer to post or act on.
        raise ModelOutputInvalid(f"the answer was cut off (finish_reason {response.finish_reason!r})", usage=usage)
    if not isinstance(response.text, str):
        raise ModelOutputInvalid(f"the reply is {type(response.text).__name__}, not text", usage=usage)
    text = clean_text(response.text)
    max_reply = _limit("AGENT_MAX_REPLY_CHARS", 16000)
    if len(text) > max_reply:
        raise ModelOutputInvalid(f"the reply has {len(text)} characters; at most {max_reply}", usage=usage)
    calls = list(response.tool_calls or [])
    max_calls = _limit("AGENT_MAX_TOOL_CALLS_PER_STEP", 16)
    if len(calls) > max_calls:
        raise ModelOutputInvalid(f"{len(calls)} tool calls in one step; at most {max_calls}", usage=usage)
    max_args = _limit("AGENT_MAX_TOOL_ARGUMENT_CHARS", 16000)
    seen: set[str] = set()
    clean: list[ToolCallRequest] = []
    for n, call in enumerate(calls, 1):
        # The id only pairs a call with its result, and the answer is stored once as given here: a call
        # without one (a model API that has none) or whose id is taken (some endpoints give every
        # parallel call of an answer the same id: DeepSeek's, Zhipu GLM's) gets a fresh one, rather
        # than the whole answer refused every time.
        given = getattr(call, "id", None)
        try:
            call_id = "" if given in (None, "") else _printable_name(given, f"tool call {n}'s id", 100)
            name = _printable_name(getattr(call, "name", None), f"tool call {n}'s name", 100)
        except ModelOutputInvalid as exc:
            raise ModelOutputInvalid(str(exc), usage=usage) from None
        if not call_id or call_id in seen:
            call_id = f"call_{uuid.uuid4().hex}"
        seen.add(call_id)
        arguments = call.arguments
        if not isinstance(arguments, str):
            raise ModelOutputInvalid(f"tool call {n}'s arguments are not JSON text", usage=usage)
        if len(arguments) > max_args:
            raise ModelOutputInvalid(
                f"tool call {n}'s arguments have {len(arguments)} characters; at most {max_args}", usage=usage
            )
        if clean_text(arguments) != arguments:
            raise ModelOutputInvalid(f"tool call {n}'s arguments contain NUL or invalid Unicode", usage=usage)
        clean.append(ToolCallRequest(id=call_id, name=name, arguments=arguments))
    if not clean and not shows_something(text):
        # Nothing to post and nothing to run: stored as an answer it would end the run with the
        # customer unanswered (an answer of zero-width characters is an empty bubble in the chat).
        # Another generation may well say something.
        raise ModelOutputInvalid("the answer has no text and asks for no tool call", usage=usage)
    return ModelResponse(
        text=text,
        tool_calls=clean,
        usage=usage,
        model=str(response.model or ""),
        finish_reason=str(response.finish_reason or "")[:32],
    )


def reply_chars(piece: str) -> int:
    """Characters ``piece`` adds to a reply as ``validate_response`` counts it (NULs are dropped)."""
    return len(piece) - piece.count("\x00")


class StreamMeter:
    """The limits ``validate_response`` enforces on a whole answer, counted as the answer streams in.

    A stream that goes past one (a model repeating itself with no token limit, a broken proxy)
    is stopped there with ModelOutputInvalid, instead of being read, kept in memory and shown to
    the customer until the task's time limit: the answer would be refused whole anyway. A stream
    still going after AGENT_MODEL_STEP_SECONDS is stopped with a retryable ModelError (a server
    sending a chunk just before each read timeout never trips the timeout). ``prompt_tokens``
    (an estimate, asked for only then) goes into the usage these errors carry, so the loop records
    the tokens wasted.
    """

    def __init__(self, *, prompt_tokens: Callable[[], int] = lambda: 0) -> None:
        self.max_reply = _limit("AGENT_MAX_REPLY_CHARS", 16000)
        self.max_calls = _limit("AGENT_MAX_TOOL_CALLS_PER_STEP", 16)
        self.max_arguments = _limit("AGENT_MAX_TOOL_ARGUMENT_CHARS", 16000)
        self.seconds = float(getattr(settings, "AGENT_MODEL_STEP_SECONDS", 300))
        self.deadline = time.monotonic() + self.seconds
        self.prompt_tokens = prompt_tokens
        self.text = 0
        self.generated = 0

    def usage(self) -> Usage:
        return Usage(self.prompt_tokens(), wasted_tokens(self.generated), estimated=True)

    def add_text(self, piece: str) -> None:
        """Count a piece of the reply; call before showing it to anyone."""
        self.text += reply_chars(piece)
        self.generated += len(piece)
        if self.text > self.max_reply:
            raise ModelOutputInvalid(
                f"the reply passed {self.max_reply} characters while streaming; stopped there", usage=self.usage()
            )

    def add_call(self, calls: int) -> None:
        """``calls`` tool calls have begun in this answer."""
        if calls > self.max_calls:
            raise ModelOutputInvalid(
                f"more than {self.max_calls} tool calls in one step while streaming; stopped there", usage=self.usage()
            )

    def add_arguments(self, n: int, piece: str, total: int) -> None:
        """Tool call ``n`` (from 1) has ``total`` characters of arguments once ``piece`` is added."""
        self.generated += len(piece)
        if total > self.max_arguments:
            raise ModelOutputInvalid(
                f"tool call {n}'s arguments passed {self.max_arguments} characters while streaming; stopped there",
                usage=self.usage(),
            )

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise ModelError(
                f"the answer was still streaming after {self.seconds:g} s (AGENT_MODEL_STEP_SECONDS); stopped there",
                retryable=True,
                usage=self.usage(),
            )


# How long past the step's deadline a model call is still waited for: the adapter's own stop at the
# deadline (the OpenAI-compatible one cuts its socket reads there), with the tokens it counted, comes first.
STEP_GRACE_SECONDS = 2.0


def complete_within_step(
    model: ChatModel, *, messages: list[Message], tools: list[ToolSpec], on_token: TokenCallback, meter: StreamMeter
) -> ModelResponse:
    """``model.complete``, waited for until the step's deadline (``meter``, AGENT_MODEL_STEP_SECONDS)
    and STEP_GRACE_SECONDS more. The meter stops a stream at the deadline only as pieces arrive; a call
    that streams nothing and never returns (a model of the deployment's own whose client has no
    timeout, a lock) held the pass, and every worker that took the ticket over after it, for good.
    Past the wait the call is given up: a retryable ModelError, counted as any failed step. Its thread
    cannot be stopped; it is left to end when it may, and any text it streams from then on is refused.

    A model that ends its own calls at the step's deadline (``bounds_its_own_step``: the
    OpenAI-compatible adapter, whose every socket read ends with the step, and the offline model) is
    called where it is: a thread more per step cost the turn about a tenth of its time. So is one
    inside a transaction of the caller's (a test's, which wraps it all): no other connection could
    read what that transaction holds."""
    if connection.in_atomic_block or getattr(model, "bounds_its_own_step", False) is True:
        return model.complete(messages=messages, tools=tools, on_token=on_token)
    given_up = threading.Event()
    finished = threading.Event()
    outcome: dict[str, Any] = {}

    def guarded(text: str) -> None:
        if given_up.is_set():
            raise ModelError("the step's time was over; this answer was given up", retryable=True)
        on_token(text)

    def call() -> None:
        try:
            outcome["response"] = model.complete(messages=messages, tools=tools, on_token=guarded)
        except BaseException as exc:  # noqa: BLE001 - raised in the pass's thread
            outcome["error"] = exc
        finally:
            finished.set()
            connection.close()  # one a model of the deployment's own opened in this thread

    threading.Thread(target=call, name="model-call", daemon=True).start()
    try:
        done = finished.wait(max(0.0, meter.deadline - time.monotonic()) + STEP_GRACE_SECONDS)
    except BaseException:
        given_up.set()  # the pass is going down (a time limit, a shutdown): nothing streams on behind it
        raise
    if not done:
        given_up.set()
        raise ModelError(
            f"the model did not answer within {meter.seconds:g} s (AGENT_MODEL_STEP_SECONDS); given up",
            retryable=True,
            usage=meter.usage(),
        )
    if "error" in outcome:
        raise outcome["error"]
    return outcome["response"]


@runtime_checkable
class ChatModel(Protocol):
    #: Recorded on every model step.
    name: str

    def complete(
        self,
        *,
        messages: list[Message],
        tools: list[ToolSpec],
        on_token: TokenCallback | None = None,
    ) -> ModelResponse:
        """Answer the conversation, streaming text through ``on_token``; raise ModelError on failure."""
        ...
