"""A model stream that does not end is stopped at the limits of an accepted answer.

The limits (AGENT_MAX_REPLY_CHARS, AGENT_MAX_TOOL_CALLS_PER_STEP, AGENT_MAX_TOOL_ARGUMENT_CHARS) were
checked only once the stream had ended: a model repeating itself with no token limit, or a broken
proxy, kept the worker reading, kept the text in its memory and streamed all of it to the
customer's chat, until the task's time limit (10 minutes, three times over before the ticket was
parked). A server sending a chunk just before each read timeout was never stopped at all. Now the
answer is counted as it streams: past a limit, or after AGENT_MODEL_STEP_SECONDS, the step fails
there (its wasted tokens recorded) and the ticket is parked after the usual failures in a row.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from agents.llm import ModelError, ModelOutputInvalid, ModelResponse
from agents.llm_openai import OpenAIChatModel
from agents.models import AgentRun, ModelStep, RunStatus, StepStatus
from agents.runner import advance
from tests.agents.conftest import retry_time_comes
from tests.agents.openai_server import OpenAIServer, _Chunks, _Handler, serving
from tests.conftest import make_customer
from tests.workers import purge_stream_buffers
from tickets import realtime
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, TicketStatus

MESSAGES = [{"role": "user", "content": "Where is my order A-1001?"}]


class _Endless(_Handler):
    """Streams one kind of piece until the client hangs up: ``text``, the ``arguments`` of one tool
    call, ever more ``calls``, or one word every ``pause`` seconds (``trickle``)."""

    kind = "text"
    pause = 0.0

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self._start_stream()
        chunks = _Chunks(body, include_usage=True)
        n = 0
        try:
            if self.kind == "arguments":
                function = {"name": "search_help", "arguments": '{"query": "'}
                call = {"index": 0, "id": "call_1", "type": "function", "function": function}
                self._send_event(json.dumps(chunks.chunk({"tool_calls": [call]})))
            while n < 1_000_000:
                if self.kind == "arguments":
                    delta = {"tool_calls": [{"index": 0, "function": {"arguments": "again and again "}}]}
                elif self.kind == "calls":
                    call = {"index": n, "id": f"call_{n}", "type": "function",
                            "function": {"name": "list_orders", "arguments": "{}"}}  # fmt: skip
                    delta = {"tool_calls": [call]}
                else:
                    delta = {"content": "again and again "}
                self._send_event(json.dumps(chunks.chunk(delta)))
                n += 1
                if self.pause:
                    time.sleep(self.pause)
        except OSError:
            pass  # the client hung up
        self.close_connection = True


def endless(kind: str, pause: float = 0.0) -> Iterator[str]:
    with serving(type("H", (_Endless,), {"kind": kind, "pause": pause})) as url:
        yield url


@pytest.fixture
def endless_text() -> Iterator[str]:
    yield from endless("text")


def adapter(url: str) -> OpenAIChatModel:
    return OpenAIChatModel(model="loop", api_key="k", base_url=url, timeout=5, max_retries=0)


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("text", "the reply passed 2000 characters while streaming"),
        ("arguments", "tool call 1's arguments passed 2000 characters while streaming"),
        ("calls", "more than 16 tool calls in one step while streaming"),
    ],
)
def test_an_answer_streaming_past_a_limit_is_stopped_there_not_read_to_its_end(kind, error, settings):
    settings.AGENT_MAX_REPLY_CHARS = 2000
    settings.AGENT_MAX_TOOL_ARGUMENT_CHARS = 2000
    settings.AGENT_MAX_TOOL_CALLS_PER_STEP = 16
    shown: list[str] = []
    with serving(type("H", (_Endless,), {"kind": kind})) as url:
        with pytest.raises(ModelOutputInvalid, match=error) as raised:
            adapter(url).complete(messages=MESSAGES, tools=[], on_token=shown.append)

    assert len("".join(shown)) <= 2000, "text past the longest accepted reply was shown to the customer"
    # The tokens spent on it are counted as wasted by the loop.
    assert raised.value.usage is not None and raised.value.usage.total_tokens > 0


def test_a_stream_that_trickles_on_past_the_step_deadline_is_stopped_and_may_be_tried_again(settings):
    settings.AGENT_MODEL_STEP_SECONDS = 1
    with serving(type("H", (_Endless,), {"kind": "text", "pause": 0.1})) as url:
        began = time.monotonic()
        with pytest.raises(ModelError, match="still streaming after 1 s") as raised:
            adapter(url).complete(messages=MESSAGES, tools=[])

    assert time.monotonic() - began < 10, "stopped long after its 1 s"  # unbounded before; margin for a loaded CI
    assert raised.value.retryable


def test_max_tokens_is_sent_to_the_endpoint_only_when_set(openai_server: OpenAIServer, settings):
    openai_server.enqueue_text("Hello.")
    openai_server.enqueue_text("Hello.")
    model = OpenAIChatModel(model="m", api_key="k", base_url=openai_server.url, timeout=5)

    model.complete(messages=MESSAGES, tools=[])
    settings.AGENT_MAX_OUTPUT_TOKENS = 4096
    model.complete(messages=MESSAGES, tools=[])

    assert "max_tokens" not in openai_server.requests[0]
    assert openai_server.requests[1]["max_tokens"] == 4096


@pytest.fixture
def _clean_buffers() -> Iterator[None]:
    purge_stream_buffers()
    yield
    purge_stream_buffers()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_clean_buffers")
def test_a_reply_that_never_ends_is_not_streamed_to_the_customer_past_the_limit_and_the_ticket_is_parked(
    endless_text, settings, monkeypatch
):
    settings.AGENT_MAX_REPLY_CHARS = 2000
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Hello there")
    streamed: list[str] = []
    original = realtime.stream_token

    def watching(ticket_id, step_id, offset, text, **kwargs):  # noqa: ANN001, ANN003, ANN202
        streamed.append(text)
        original(ticket_id, step_id, offset, text, **kwargs)

    monkeypatch.setattr(realtime, "stream_token", watching)
    model = adapter(endless_text)

    states = []
    for _ in range(3):
        states.append(advance(ticket.pk, model=model).state)
        retry_time_comes(ticket.pk)

    assert states == ["retry", "retry", "parked"]
    assert len("".join(streamed)) <= 3 * 2000, "the customer's chat was streamed past the longest accepted reply"
    assert realtime.streamed_so_far(ticket.pk) == (None, "")
    failed = ModelStep.objects.filter(ticket=ticket, status=StepStatus.FAILED)
    assert failed.count() == 3
    assert all("passed 2000 characters" in step.error and step.wasted_tokens >= 500 for step in failed)
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.FAILED
    assert not Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, body__contains="again").exists()


class _StreamsForever:
    """A model class of one's own (AGENT_MODEL=package.Class) that streams text and never returns."""

    name = "streams-forever"

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN201
        while True:
            on_token("again and again ")
        return ModelResponse(text="")  # never reached


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_clean_buffers")
def test_a_model_class_of_ones_own_that_streams_without_end_is_stopped_at_the_limit_too(settings):
    settings.AGENT_MAX_REPLY_CHARS = 2000
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Hello there")

    assert advance(ticket.pk, model=_StreamsForever()).state == "retry"

    step = ModelStep.objects.get(ticket=ticket)
    assert step.status == StepStatus.FAILED and "passed 2000 characters" in step.error
    assert step.wasted_tokens >= 500
