"""The customer's Confirm is an answer to the question shown, and to nothing else: an answer that
says more (another amount, another order) is refused with a 400 that names what it cannot read, and
nothing is recorded. Such an answer was taken as a Confirm of the question's own amount (200), and
that amount was refunded, whatever the answer had said."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest
from django.test import Client

from agents.models import CallStatus, ConfirmationDecision
from agents.runner import advance
from tests.agents.test_money_gates import Refunds, only_the_order_threshold, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.customer_confirms,
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]


@pytest.mark.parametrize(
    "extra",
    [{"amount_cents": 1000}, {"order_number": "CF-999"}, {"answer_text": "yes, but only $10"}],
    ids=["another-amount", "another-order", "words"],
)
def test_a_confirm_that_says_more_than_the_question_is_refused_and_pays_nothing(sandbox, extra):  # noqa: ANN001
    only_the_order_threshold()
    customer = make_customer()
    order = order_for(customer, "CF-101", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $40 on CF-101")
    model = Refunds(("CF-101", 4000))
    advance(ticket.pk, model=model)
    (asked,) = refund_calls(ticket)
    assert asked.status == CallStatus.AWAITING_CONFIRMATION and asked.confirmation_text
    client = Client(raise_request_exception=False)
    client.force_login(customer.user)

    response = client.post(
        f"/tickets/{ticket.pk}/confirmations/{asked.pk}",
        json.dumps({"answer": "confirm", "digest": asked.confirmation_digest, **extra}),
        content_type="application/json",
    )
    advance(ticket.pk, model=model)

    assert response.status_code == 400, (response.status_code, response.content[:300])
    (name,) = extra
    assert repr(name) in response.json()["error"]
    asked.refresh_from_db()
    assert asked.confirmation_decision is None and asked.status == CallStatus.AWAITING_CONFIRMATION
    assert paid(sandbox, order) == []
    assert not ticket.events.filter(kind="confirmation_decided").exists()

    # The answer the chat's buttons send still confirms, and pays the amount asked.
    plain = client.post(
        f"/tickets/{ticket.pk}/confirmations/{asked.pk}",
        json.dumps({"answer": "confirm", "digest": asked.confirmation_digest}),
        content_type="application/json",
    )
    advance(ticket.pk, model=model)
    assert plain.status_code == 200, plain.content[:300]
    asked.refresh_from_db()
    assert asked.confirmation_decision == ConfirmationDecision.CONFIRMED
    assert [r["amount"] for r in paid(sandbox, order)] == [4000]


@pytest.mark.parametrize("encoding", ["multipart", "urlencoded"])
def test_an_answer_sent_as_a_form_with_another_field_is_refused(encoding):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund")
    client = Client(raise_request_exception=False)
    client.force_login(customer.user)
    fields = {"answer": "confirm", "digest": "x", "amount_cents": "1000", "csrfmiddlewaretoken": "from a plain form"}
    url = f"/tickets/{ticket.pk}/confirmations/1"

    if encoding == "multipart":
        response = client.post(url, fields)
    else:
        response = client.post(url, urlencode(fields), content_type="application/x-www-form-urlencoded")

    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert "'amount_cents'" in response.json()["error"] and "csrfmiddlewaretoken" not in response.json()["error"]


def test_an_answer_sent_twice_in_one_form_is_refused_and_pays_nothing(sandbox):  # noqa: ANN001
    """``answer=cancel&answer=confirm``: the last one counted, a Confirm, and the refund was paid."""
    only_the_order_threshold()
    customer = make_customer()
    order = order_for(customer, "CF-201", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $40 on CF-201")
    model = Refunds(("CF-201", 4000))
    advance(ticket.pk, model=model)
    (asked,) = refund_calls(ticket)
    client = Client(raise_request_exception=False)
    client.force_login(customer.user)

    response = client.post(
        f"/tickets/{ticket.pk}/confirmations/{asked.pk}",
        urlencode([("answer", "cancel"), ("answer", "confirm"), ("digest", asked.confirmation_digest)]),
        content_type="application/x-www-form-urlencoded",
    )
    advance(ticket.pk, model=model)

    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert "'answer'" in response.json()["error"]
    asked.refresh_from_db()
    assert asked.confirmation_decision is None
    assert paid(sandbox, order) == []
