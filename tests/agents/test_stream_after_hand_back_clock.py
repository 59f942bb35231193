"""Whether an answer was begun before a person took the ticket is judged on one clock, Redis's.

No word of an answer the agent was writing when a person took the ticket streams after they hand it
back, and every word of one begun after the hand-back does (tests/agents/test_hand_back.py). The
answer's start was the worker's clock and the take-over the clock of the web host where the person
pressed the button: on many hosts, with one clock ten minutes off, a worker running ahead streamed a
stale answer to the customer after a person had replied and handed back (words the agent never
posts), and after a take-over on a web host running ahead the agent's answers did not stream for
ten minutes after the hand-back (the customer watched 'typing', then the whole answer at once).
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.runner import advance
from tests.agents.test_backoff_clock import on_a_host_whose_clock_is_off
from tests.agents.test_hand_back import FRESH, STALE, Answers, _tokens_published_while, open_ticket
from tests.agents.test_money_path import public_words
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

SKEW = timedelta(minutes=10)
REAL_TIME, REAL_NOW = time.time, timezone.now


def on_a_web_host_whose_clock_is_off(monkeypatch: pytest.MonkeyPatch, offset: timedelta, action) -> None:  # noqa: ANN001
    """Run ``action`` as a web process on a host whose clock is ``offset`` from the others'."""
    real_time, was = time.time, timezone.now
    monkeypatch.setattr(timezone, "now", lambda: REAL_NOW() + offset)
    monkeypatch.setattr(time, "time", lambda: REAL_TIME() + offset.total_seconds())
    try:
        action()
    finally:
        monkeypatch.setattr(time, "time", real_time)
        monkeypatch.setattr(timezone, "now", was)


def test_no_word_of_a_stale_answer_streams_after_a_hand_back_from_a_worker_whose_clock_runs_ahead(person, monkeypatch):  # noqa: ANN001
    ticket = open_ticket()

    def person_answers_and_hands_back() -> None:  # on a web host whose clock is right
        on_a_web_host_whose_clock_is_off(monkeypatch, timedelta(0), answer_and_hand_back)

    def answer_and_hand_back() -> None:
        ticket_services.staff_reply(ticket=ticket.pk, user=person, body="It arrives tomorrow.", client_msg_id="s1")
        ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)

    model = Answers(STALE, meanwhile=person_answers_and_hands_back)
    back = on_a_host_whose_clock_is_off(monkeypatch, SKEW)  # the worker runs ahead
    try:
        pieces = _tokens_published_while(ticket, lambda: advance(ticket.pk, model=model))
    finally:
        back()

    assert STALE not in public_words(ticket)  # not posted: it was written before the person's reply
    assert "".join(pieces).strip() == ""  # ...so none of it may be shown either


def test_an_answer_begun_after_a_hand_back_streams_when_the_take_over_came_from_a_host_ahead(person, monkeypatch):  # noqa: ANN001
    ticket = open_ticket()
    on_a_web_host_whose_clock_is_off(
        monkeypatch, SKEW, lambda: ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
    )
    ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)  # without a word: the agent answers

    pieces = _tokens_published_while(ticket, lambda: advance(ticket.pk, model=Answers(FRESH)))

    assert FRESH in public_words(ticket)
    assert "".join(pieces).strip() == FRESH
