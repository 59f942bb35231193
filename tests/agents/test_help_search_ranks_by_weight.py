"""The help search answers from the article that matches best: with the demo data, "What is your
refund policy?" (a README demo question) is answered from "Refund policy". The rank reads the stored
search vector, with its title and body weights (``SearchRank(F("search_vector"), ...)``); ranked from
the vector's text, every matching article ranked the same and the alphabetically first one won."""

from __future__ import annotations

import pytest

from agents.runner import advance
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.demo import seed_demo
from tickets.models import AuthorKind, Message

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_readme_refund_policy_question_is_answered_from_the_refund_policy_article():
    seed_demo()
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="", body="What is your refund policy?")

    advance(ticket.pk)

    replies = list(
        Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, is_public=True).values_list(
            "body", flat=True
        )
    )
    assert replies, "the agent did not answer"
    assert "Refund policy" in replies[0], (
        "asked 'What is your refund policy?' (README's demo question), the agent answered from another "
        f"article: {replies[0]!r}"
    )
