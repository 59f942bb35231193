"""A server that answers a request for tools in the older functions API's shape: ``delta.function_call``
(a name, then argument text in pieces) and ``finish_reason: "function_call"``, as OpenAI's API did
before tools and some compatible servers still do. The call is run; it was read as an answer with no
text and no call, failed every time, and the ticket was parked with a person after three.
"""

from __future__ import annotations

import json

import pytest

from agents.llm_openai import OpenAIChatModel
from agents.models import CallStatus, ToolCall
from agents.runner import advance
from tests.agents.openai_server import _Chunks, _Handler, serving
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = pytest.mark.django_db(transaction=True)

ARGUMENTS = json.dumps({"order_number": "A-1001"})
ANSWER = "Your order A-1001 is on its way."


class _OlderFunctionCall(_Handler):
    asked = 0

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        first = type(self).asked == 0
        type(self).asked += 1
        self._start_stream()
        chunks = _Chunks(body, include_usage=True)
        if first:
            named = {"role": "assistant", "content": None, "function_call": {"name": "lookup_order", "arguments": ""}}
            self._send_event(json.dumps(chunks.chunk(named)))
            for i in range(0, len(ARGUMENTS), 5):
                self._send_event(json.dumps(chunks.chunk({"function_call": {"arguments": ARGUMENTS[i : i + 5]}})))
            self._send_event(json.dumps(chunks.chunk({}, finish_reason="function_call")))
        else:
            self._send_event(json.dumps(chunks.chunk({"content": ANSWER})))
            self._send_event(json.dumps(chunks.chunk({}, finish_reason="stop")))
        self._send_event("[DONE]")
        self._end_stream()


@pytest.fixture
def url():
    with serving(type("H", (_OlderFunctionCall,), {"asked": 0})) as url:
        yield url


def test_a_function_call_in_the_older_shape_is_a_tool_call(url):
    model = OpenAIChatModel(model="old", api_key="k", base_url=url, max_retries=0, timeout=5)

    response = model.complete(messages=[{"role": "user", "content": "Where is A-1001?"}], tools=[])

    assert [(c.name, json.loads(c.arguments)) for c in response.tool_calls] == [
        ("lookup_order", {"order_number": "A-1001"})
    ]
    assert response.text == ""


def test_the_order_is_looked_up_and_the_customer_answered(url):
    customer = make_customer()
    make_order(customer, number="A-1001")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body="Where is A-1001?")

    advance(ticket.pk, model=OpenAIChatModel(model="old", api_key="k", base_url=url, max_retries=0, timeout=5))

    calls = list(ToolCall.objects.filter(ticket=ticket).values_list("name", "status"))
    assert calls == [("lookup_order", CallStatus.SUCCEEDED)]
    replies = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).values_list("body", flat=True)
    assert list(replies) == [ANSWER]
