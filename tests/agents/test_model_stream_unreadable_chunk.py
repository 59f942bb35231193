"""An OpenAI-compatible endpoint that sends an unreadable chunk mid-stream: handled like a cut stream.

A proxy that cuts a line in two, or a server that sends ``data: {"choices": null}``, makes the SDK
raise something that is not an ``openai.OpenAIError``. The adapter turns it into a retryable
ModelError: the failed step is stored with its wasted tokens (DESIGN.md invariant 6), the half
answer is cleared from the streaming buffer (a chat opened during the backoff shows no words that
will never be posted), and the next attempt streams under its own id, so nobody reads the text twice.
"""

from __future__ import annotations

import json

import pytest

from agents.llm_openai import OpenAIChatModel
from agents.models import ModelStep, StepStatus
from agents.runner import advance
from tests.agents.conftest import retry_time_comes
from tests.agents.openai_server import _Chunks, _Handler, serving
from tests.conftest import make_customer
from tests.workers import purge_stream_buffers
from tickets import realtime
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = pytest.mark.django_db(transaction=True)

HALF = "Your order A-1001 left our warehouse on "
ANSWER = "Your order A-1001 left our warehouse on Monday and arrives on Thursday."


class _Garbling(_Handler):
    """First request: a few good chunks, then a chunk that is not JSON. Then good answers."""

    served = 0

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length))
        type(self).served += 1
        self._start_stream()
        chunks = _Chunks(body, include_usage=True)
        if type(self).served == 1:
            for chunk in chunks.text_deltas(HALF):
                self._send_event(json.dumps(chunk))
            self._send_event('{"id": "chatcmpl-x", "choices": [{"index": 0, "delta": {"content": "Mon')  # cut
            self._send_event("[DONE]")
            self._end_stream()
            return
        for chunk in chunks.text_deltas(ANSWER):
            self._send_event(json.dumps(chunk))
        self._send_event(json.dumps(chunks.chunk({}, finish_reason="stop")))
        self._send_event("[DONE]")
        self._end_stream()


@pytest.fixture
def garbling_server():
    with serving(type("H", (_Garbling,), {"served": 0})) as url:
        yield url


@pytest.fixture(autouse=True)
def _clean_buffers():
    purge_stream_buffers()
    yield
    purge_stream_buffers()


def test_a_malformed_chunk_mid_stream_leaves_no_half_answer_and_is_recorded_like_a_cut_stream(
    garbling_server, monkeypatch
):
    model = OpenAIChatModel(model="gpt-test", api_key="k", base_url=garbling_server, max_retries=0, timeout=5)
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Order", body="Where is A-1001?")

    first = advance(ticket.pk, model=model)

    assert first.state == "retry"
    # A chat opened during the backoff shows no words of an answer that will never be posted.
    assert realtime.streamed_so_far(ticket.pk) == (None, ""), "the broken generation's half answer stays shown"
    # The failed generation is on the ledger like any other cut-off generation, with its wasted tokens.
    failed = list(ModelStep.objects.filter(ticket=ticket).exclude(status=StepStatus.COMPLETED))
    assert len(failed) == 1, "the broken generation left no step on the ledger"
    assert failed[0].wasted_tokens > 0

    # The retry streams the new answer; a page opened while it streams reads it once, not after the
    # old half answer.
    seen: list[str] = []
    original = realtime.stream_token

    def watching(ticket_id, step_id, offset, text, **kwargs):  # noqa: ANN001, ANN003, ANN202
        original(ticket_id, step_id, offset, text, **kwargs)
        seen.append(realtime.streamed_so_far(ticket_id)[1])

    monkeypatch.setattr(realtime, "stream_token", watching)
    retry_time_comes(ticket.pk)
    assert advance(ticket.pk, model=model).state == "completed"
    assert seen and all(ANSWER.startswith(text) for text in seen), seen[:3]
    replies = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT)
    assert [m.body for m in replies] == [ANSWER]
