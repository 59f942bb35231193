"""A model that writes its tool call into the answer's text, as its chat template does, is not shown
to the customer: the call is run.

Qwen, Hermes and other models served without the server's tool parser (vLLM without
``--enable-auto-tool-choice``, a bare llama.cpp or TGI) answer a request for a tool with
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` in ``content``, and ``finish_reason``
``stop``. Streamed and posted as it came, the customer read the raw call, and the order was never
looked up.
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

PREAMBLE = "Let me check that order for you."
WRITTEN = (
    '<tool_call>\n{"name": "lookup_order", "arguments": {"order_number": "A-1001"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "search_help", "arguments": {"query": "late delivery"}}\n</tool_call>'
)
ANSWER = "Your order A-1001 is on its way."


class _WritesItsCalls(_Handler):
    """The first request is answered with the calls written into the text, the next with ``ANSWER``."""

    asked = 0
    written = PREAMBLE + " " + WRITTEN

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        cls = type(self)
        text = cls.written if cls.asked == 0 else ANSWER
        cls.asked += 1
        self._start_stream()
        chunks = _Chunks(body, include_usage=True)
        for i in range(0, len(text), 6):  # pieces that cut the tags too
            self._send_event(json.dumps(chunks.chunk({"content": text[i : i + 6]})))
        self._send_event(json.dumps(chunks.chunk({}, finish_reason="stop")))
        self._send_event("[DONE]")
        self._end_stream()


@pytest.fixture
def url():
    _WritesItsCalls.asked = 0
    with serving(_WritesItsCalls) as url:
        yield url


def model_at(url: str) -> OpenAIChatModel:
    return OpenAIChatModel(model="qwen-test", api_key="k", base_url=url, max_retries=0, timeout=5)


def test_calls_written_into_the_text_are_calls_and_are_not_streamed(url):
    streamed: list[str] = []

    response = model_at(url).complete(
        messages=[{"role": "user", "content": "Where is A-1001?"}], tools=[], on_token=streamed.append
    )

    assert [(c.name, json.loads(c.arguments)) for c in response.tool_calls] == [
        ("lookup_order", {"order_number": "A-1001"}),
        ("search_help", {"query": "late delivery"}),
    ]
    assert "tool_call" not in "".join(streamed) and "tool_call" not in response.text, streamed
    assert response.text.strip() == PREAMBLE


def test_the_customer_never_reads_the_raw_call_and_the_order_is_looked_up(url):
    customer = make_customer()
    make_order(customer, number="A-1001")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body="Where is A-1001?")

    advance(ticket.pk, model=model_at(url))

    public = list(Message.objects.filter(ticket=ticket, is_public=True).values_list("author_kind", "body"))
    assert all("tool_call" not in body for _, body in public), public
    assert [body for kind, body in public if kind == AuthorKind.AGENT] == [ANSWER]
    names = list(ToolCall.objects.filter(ticket=ticket).order_by("index").values_list("name", "status"))
    assert names == [("lookup_order", CallStatus.SUCCEEDED), ("search_help", CallStatus.SUCCEEDED)]


# Other models' chat templates write their calls otherwise: Mistral's after a [TOOL_CALLS] token, as a
# JSON list; Llama 3.x's after <|python_tag|>, or as a JSON object that is the whole message.
OTHER_FORMATS = {
    "mistral": PREAMBLE
    + ' [TOOL_CALLS][{"name": "lookup_order", "arguments": {"order_number": "A-1001"}}, '
    + '{"name": "search_help", "arguments": {"query": "late delivery"}}]',
    "llama-python-tag": PREAMBLE
    + ' <|python_tag|>{"name": "lookup_order", "parameters": {"order_number": "A-1001"}}; '
    + '{"name": "search_help", "parameters": {"query": "late delivery"}}<|eom_id|>',
    "llama-json": '{"name": "lookup_order", "parameters": {"order_number": "A-1001"}}',
    "mistral-v11": PREAMBLE
    + ' [TOOL_CALLS]lookup_order[ARGS]{"order_number": "A-1001"}'
    + '[TOOL_CALLS]search_help[CALL_ID]a1b2c3d4e[ARGS]{"query": "late delivery"}',
}
TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
    for name in ("lookup_order", "search_help")
]


@pytest.fixture(params=sorted(OTHER_FORMATS))
def other_format(request):
    handler = type("H", (_WritesItsCalls,), {"asked": 0, "written": OTHER_FORMATS[request.param]})
    with serving(handler) as url:
        yield request.param, url


def test_calls_written_in_other_models_formats_are_calls_and_are_not_streamed(other_format):
    name, url = other_format
    streamed: list[str] = []

    response = model_at(url).complete(
        messages=[{"role": "user", "content": "Where is A-1001?"}], tools=TOOLS, on_token=streamed.append
    )

    expected = [("lookup_order", {"order_number": "A-1001"}), ("search_help", {"query": "late delivery"})]
    assert [(c.name, json.loads(c.arguments)) for c in response.tool_calls] == expected[: len(response.tool_calls)]
    assert len(response.tool_calls) == (1 if name == "llama-json" else 2), response.tool_calls
    for machinery in ("TOOL_CALLS", "ARGS", "python_tag", "eom_id", '"name"', "parameters"):
        assert machinery not in "".join(streamed) and machinery not in response.text, streamed
    assert response.text.strip() == ("" if name == "llama-json" else PREAMBLE)


def test_a_customer_never_reads_a_call_written_in_another_format_and_it_is_run(other_format):
    _, url = other_format
    customer = make_customer()
    make_order(customer, number="A-1001")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body="Where is A-1001?")

    advance(ticket.pk, model=model_at(url))

    public = list(Message.objects.filter(ticket=ticket, is_public=True).values_list("author_kind", "body"))
    assert all("name" not in body and "TOOL_CALLS" not in body for _, body in public), public
    assert [body for kind, body in public if kind == AuthorKind.AGENT] == [ANSWER]
    calls = list(ToolCall.objects.filter(ticket=ticket).order_by("index").values_list("name", "status"))
    assert calls[0] == ("lookup_order", CallStatus.SUCCEEDED), calls


@pytest.mark.parametrize("text", ['{"note": "Your order A-1001 is on its way."}', '{"name": "Ada Lovelace"}'])
def test_a_json_answer_that_is_not_a_call_is_posted_as_it_came(text):
    handler = type("H", (_WritesItsCalls,), {"asked": 0, "written": text})
    streamed: list[str] = []

    with serving(handler) as url:
        response = model_at(url).complete(
            messages=[{"role": "user", "content": "Where is A-1001?"}], tools=TOOLS, on_token=streamed.append
        )

    assert response.tool_calls == [] and response.text == text == "".join(streamed)
