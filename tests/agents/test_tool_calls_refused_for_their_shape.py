"""A model that asks, step after step, for tool calls that cannot be run as asked (a tool that does not
exist, arguments that are not JSON, or JSON that is not an object) is a failing model, not progress.

Each such call is refused to the model, which may correct itself; asking for such calls again right
after counts as a failure in a row, so a model (or a server's dialect) that repeats the mistake is parked
with a person after AGENT_MAX_CONSECUTIVE_FAILURES repeats, instead of being asked again until the step
limit (16 model calls, each refused the same way) and handed off as if it had worked on the ticket.
"""

from __future__ import annotations

import json

import pytest

from agents.llm_openai import OpenAIChatModel
from agents.models import AgentRun, CallStatus, RunStatus, ToolCall
from tests.agents.openai_server import _Chunks, _Handler, serving
from tests.agents.test_poison import assert_parked, drive_until_at_rest, open_ticket
from tickets.models import AuthorKind, Message

pytestmark = pytest.mark.django_db(transaction=True)


class _Scripted(_Handler):
    """Answers each request with the next of ``answers`` (the last one again once they run out): a
    tool call (name, arguments as written) or a text."""

    answers: list[tuple[str, str] | str] = []
    asked = 0

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        cls = type(self)
        answer = cls.answers[min(cls.asked, len(cls.answers) - 1)]
        cls.asked += 1
        self._start_stream()
        chunks = _Chunks(body, include_usage=True)
        if isinstance(answer, str):
            self._send_event(json.dumps(chunks.chunk({"role": "assistant", "content": answer})))
            self._send_event(json.dumps(chunks.chunk({}, finish_reason="stop")))
        else:
            name, arguments = answer
            delta = {"index": 0, "id": f"call_{cls.asked}", "type": "function"}
            self._send_event(
                json.dumps(
                    chunks.chunk({"tool_calls": [{**delta, "function": {"name": name, "arguments": arguments}}]})
                )
            )
            self._send_event(json.dumps(chunks.chunk({}, finish_reason="tool_calls")))
        self._send_event("[DONE]")
        self._end_stream()


def serve(*answers: tuple[str, str] | str):
    handler = type("Handler", (_Scripted,), {"answers": list(answers), "asked": 0})
    return handler, serving(handler)


class Counted:
    """The model over HTTP, with the requests its server has answered (``assert_parked`` reads them)."""

    def __init__(self, model: OpenAIChatModel, handler: type[_Scripted]) -> None:
        self.model, self.handler, self.name = model, handler, model.name

    @property
    def calls(self) -> int:
        return self.handler.asked

    def complete(self, **kwargs):  # noqa: ANN003, ANN201
        return self.model.complete(**kwargs)


def model_at(url: str) -> OpenAIChatModel:
    return OpenAIChatModel(model="gpt-test", api_key="k", base_url=url, max_retries=0, timeout=5)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (("frobnicate_order", "{}"), "Unknown tool 'frobnicate_order'"),
        (("lookup_order", '{"order_number": "A-1"}{"order_number": "A-2"}'), "not valid JSON"),
        (("lookup_order", '"{\\"order_number\\": \\"A-1\\"}"'), "must be a JSON object"),
    ],
    ids=["unknown-tool", "two-objects-run-together", "a-string-of-json"],
)
def test_a_model_that_keeps_asking_for_a_call_that_cannot_run_is_parked_after_the_failure_limit(call, error):
    handler, server = serve(call)
    with server as url:
        ticket = open_ticket("Where is order A-1?")

        drive_until_at_rest(ticket, model_at(url), passes=20)

        # Asked once, then again three times: each repeat a failure in a row.
        assert handler.asked == 4, f"the model was asked {handler.asked} times for the same refused call"
        assert_parked(ticket, Counted(model_at(url), handler), error=error)


def test_a_model_that_corrects_a_refused_call_answers_the_customer():
    handler, server = serve(("frobnicate_order", "{}"), "Your order A-1 is on its way.")
    with server as url:
        ticket = open_ticket("Where is order A-1?")

        drive_until_at_rest(ticket, model_at(url))

    run = AgentRun.objects.get(ticket=ticket)
    assert run.status == RunStatus.COMPLETED, (run.status, run.last_error)
    assert ToolCall.objects.get(ticket=ticket).status == CallStatus.FAILED
    replies = list(Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).values_list("body", flat=True))
    assert replies == ["Your order A-1 is on its way."]
    assert handler.asked == 2
