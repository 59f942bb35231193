"""An answer cut off by the endpoint's token limit (``finish_reason: "length"``) is not posted.

The server stopped at max_tokens, or the context filled up: the half sentence is poison output,
tried again and, after the failure limit, handed to a person; never posted as the agent's answer.
"""

from __future__ import annotations

import json

import pytest

from agents.llm_openai import OpenAIChatModel
from agents.runner import advance
from tests.agents.openai_server import _Chunks, _Handler, serving
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = pytest.mark.django_db(transaction=True)

CUT = "Your refund of $49.99 for order A-1002 will be credited to the card you paid with within"


class _CutAtMaxTokens(_Handler):
    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length))
        self._start_stream()
        chunks = _Chunks(body, include_usage=True)
        for chunk in chunks.text_deltas(CUT):
            self._send_event(json.dumps(chunk))
        self._send_event(json.dumps(chunks.chunk({}, finish_reason="length")))
        self._send_event("[DONE]")
        self._end_stream()


@pytest.fixture
def cutting_server():
    with serving(_CutAtMaxTokens) as url:
        yield url


def test_an_answer_cut_off_at_the_token_limit_is_not_posted_as_the_final_answer(cutting_server):
    model = OpenAIChatModel(model="gpt-test", api_key="k", base_url=cutting_server, max_retries=0, timeout=5)
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Refund", body="When do I get it?")

    advance(ticket.pk, model=model)

    replies = list(Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).values_list("body", flat=True))
    assert CUT not in replies, f"a half sentence was posted as the agent's answer: {replies}"
