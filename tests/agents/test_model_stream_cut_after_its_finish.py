"""A stream the endpoint cuts after the answer's finish_reason (before its usage chunk and ``[DONE]``)
holds the whole answer: it is the answer, not a failed step generated again.

Proxies and gateways that close the connection once the upstream said it was done (or drop the last
chunks on an idle timeout) cut only the end of the stream. Read as a broken stream, the answer the
customer had just watched stream in was taken off their page, generated again (its tokens wasted),
and counted as a failure; its usage, never sent, is estimated.
"""

from __future__ import annotations

import json

import pytest

from agents.llm_openai import OpenAIChatModel
from agents.models import ModelStep, StepStatus
from agents.runner import advance
from tests.agents.openai_server import _Chunks, _Handler, serving
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = "Your order A-1001 was shipped yesterday and should arrive on Friday."


class _CutAfterTheFinish(_Handler):
    asked = 0

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        type(self).asked += 1
        self._start_stream()
        chunks = _Chunks(body, include_usage=False)
        for chunk in chunks.text_deltas(ANSWER):
            self._send_event(json.dumps(chunk))
        self._send_event(json.dumps(chunks.chunk({}, finish_reason="stop")))
        # No usage chunk, no [DONE], no terminating zero-length chunk: the connection just closes.
        self.close_connection = True


@pytest.fixture
def url():
    _CutAfterTheFinish.asked = 0
    with serving(_CutAfterTheFinish) as url:
        yield url


def test_an_answer_whose_stream_is_cut_after_its_finish_is_the_answer(url):
    model = OpenAIChatModel(model="gpt-test", api_key="k", base_url=url, max_retries=0, timeout=5)

    response = model.complete(messages=[{"role": "user", "content": "Where is A-1001?"}], tools=[])

    assert response.text == ANSWER and response.finish_reason == "stop"
    assert response.usage.estimated


def test_the_customer_gets_the_answer_once_without_a_failed_step(url):
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Order", body="Where is A-1001?")

    advance(ticket.pk, model=OpenAIChatModel(model="gpt-test", api_key="k", base_url=url, max_retries=0, timeout=5))

    replies = list(Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).values_list("body", flat=True))
    assert replies == [ANSWER]
    assert list(ModelStep.objects.filter(ticket=ticket).values_list("status", flat=True)) == [StepStatus.COMPLETED]
    assert _CutAfterTheFinish.asked == 1
