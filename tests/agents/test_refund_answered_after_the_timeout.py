"""A refund the payment provider answers only after our timeout is waited for, not given up on.

The provider took the refund and was still working on it when the request timed out. Every try
after that, under the same key, was answered 409 ("another request with this key is in progress"),
and after the last try the refund was given up as unconfirmed: the customer read "We couldn't
confirm your refund ... A member of our team will check it", and the ticket went to a person,
while the provider finished paying it a moment later. A request still in flight under the key is
not an unknown outcome to hand over but one to wait for: the refund stays submitted under its key
and is asked about again with the outage's backoff, then recorded paid, once.
"""

from __future__ import annotations

import pytest

from agents.models import AgentRun, Refund, RefundStatus, RunStatus, ToolCall
from agents.runner import advance
from tests.agents.conftest import retry_time_comes
from tests.agents.test_money_path import assert_money_invariants, order_for, paid, public_words
from tests.conftest import make_customer
from tests.workers import wait_until
from tickets import services as ticket_services
from tickets.models import Ticket, TicketStatus

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def test_a_refund_the_provider_answers_after_the_timeout_is_paid_once_and_never_said_unconfirmed(sandbox, settings):  # noqa: ANN001
    settings.PAYMENTS_TIMEOUT_SECONDS = 1  # read when the adapter is made, after the sandbox fixture
    customer = make_customer()
    order = order_for(customer, "SL-1001", 5000, sandbox)
    sandbox.fault("latency:4000")  # the provider pays, and answers three seconds after our timeout
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Broken", body="Please refund order SL-1001, it arrived broken."
    )

    first = advance(ticket.pk)

    words = " ".join(public_words(ticket))
    assert "couldn't confirm" not in words and "could not be completed" not in words, words
    ticket.refresh_from_db()
    assert ticket.status != TicketStatus.WITH_HUMAN, (first, ticket.status)
    (refund,) = Refund.objects.filter(ticket=ticket)
    assert refund.status == RefundStatus.SUBMITTED and refund.escalated_at is None, (refund.status, refund.error)

    wait_until(lambda: paid(sandbox, order), timeout=30, what="the provider to pay the refund")
    retry_time_comes(ticket.pk)
    assert advance(ticket.pk).state == RunStatus.COMPLETED

    refund.refresh_from_db()
    assert refund.status == RefundStatus.SUCCEEDED, (refund.status, refund.error)
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert [r["metadata"]["idempotency_key"] for r in paid(sandbox, order)] == [call.idempotency_key]
    assert "$50.00" in public_words(ticket)[-1], public_words(ticket)
    assert Ticket.objects.get(pk=ticket.pk).status != TicketStatus.WITH_HUMAN
    assert AgentRun.objects.get(ticket=ticket).failures == 0
    assert_money_invariants(sandbox)
