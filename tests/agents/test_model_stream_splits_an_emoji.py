"""An OpenAI-compatible endpoint that streams an emoji's two UTF-16 halves in two chunks (a gateway
that cuts text by UTF-16 code units: ``"\\ud83d"``, then ``"\\ude0a"``): the customer's chat streams
the whole answer, the emoji whole, as the message posted reads.

Each half alone could not be kept or sent (Redis takes UTF-8): the piece was dropped, every later
piece came at an offset past the text kept, and a page reading the stream saw it stop at the emoji
(asking again only brought the same text back) until the message came."""

from __future__ import annotations

import json

import pytest

from agents.llm_openai import OpenAIChatModel
from agents.runner import advance
from tests.agents.openai_server import _Chunks, _Handler, serving
from tests.conftest import make_customer
from tests.workers import purge_stream_buffers
from tickets import realtime
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = "Your kettle is on its way \U0001f60a and arrives on Thursday. Anything else?"
HIGH, LOW = "\ud83d", "\ude0a"  # the emoji's two halves


class _SplittingEmoji(_Handler):
    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length))
        self._start_stream()
        chunks = _Chunks(body, include_usage=True)
        before, after = ANSWER.split("\U0001f60a")
        pieces = ["", before[:10], before[10:] + HIGH, LOW + after[:12], after[12:]]
        for n, piece in enumerate(pieces):
            delta = {"role": "assistant", "content": piece} if n == 0 else {"content": piece}
            self._send_event(json.dumps(chunks.chunk(delta)))  # ASCII: a half is sent as its \\u escape
        self._send_event(json.dumps(chunks.chunk({}, finish_reason="stop")))
        self._send_event("[DONE]")
        self._end_stream()


@pytest.fixture(autouse=True)
def _clean_buffers():
    purge_stream_buffers()
    yield
    purge_stream_buffers()


def test_an_emoji_streamed_in_two_halves_reaches_the_chat_whole(monkeypatch):  # noqa: ANN001
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Kettle", body="Where is my kettle?")
    sent: list[tuple[int, str]] = []  # the pieces the chat is sent: (offset, text)
    kept: list[str] = []  # what a page that opens (or asks again) then reads
    original = realtime.stream_token

    def watching(ticket_id, step_id, offset, text, **kwargs):  # noqa: ANN001, ANN003, ANN202
        original(ticket_id, step_id, offset, text, **kwargs)
        sent.append((offset, text))
        kept.append(realtime.streamed_so_far(ticket_id)[1])

    monkeypatch.setattr(realtime, "stream_token", watching)
    with serving(_SplittingEmoji) as url:
        model = OpenAIChatModel(model="gpt-test", api_key="k", base_url=url, max_retries=0, timeout=5)
        assert advance(ticket.pk, model=model).state == "completed"

    replies = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT)
    assert [m.body for m in replies] == [ANSWER]
    # The page appends a piece at its offset, counted in characters (code points) as it counts them.
    shown = ""
    for offset, text in sent:
        assert offset == len(shown), (offset, shown, sent)
        shown += text
    assert shown == ANSWER, sent
    assert kept[-1] == ANSWER and all(ANSWER.startswith(text) for text in kept), kept


def test_a_piece_that_cannot_be_sent_is_not_sent_and_fails_nothing(caplog):  # noqa: ANN001
    """Live updates are best effort: a piece the channel layer cannot encode is logged and left out,
    never raised into the step that streams it (the step failed, and with it the answer)."""
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Kettle", body="Where is my kettle?")

    realtime.stream_token(ticket.pk, 1 << 20, 0, "half an emoji: " + HIGH)

    assert realtime.streamed_so_far(ticket.pk) == (None, "")
    assert "could not send a piece of the answer" in caplog.text
