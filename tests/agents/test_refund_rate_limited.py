"""A refund the payment provider turns away for a while with 429 (too many requests) is paid once it
takes it, not given up on.

A 429 says nothing was done and to ask again later. After the last of a refund's quick tries it was
given up as unconfirmed: the customer read "We couldn't confirm your refund ... A member of our team
will check it", the ticket went to a person, and the reconciler then failed the refund the provider
never made. It is waited out as an outage: the refund stays submitted under its key and is tried again
with the outage's backoff, asking the provider first what happened under the key.
"""

from __future__ import annotations

import pytest

from agents.models import AgentRun, Refund, RefundStatus, RunStatus, ToolCall
from agents.runner import advance
from tests.agents.conftest import retry_time_comes
from tests.agents.test_money_path import assert_money_invariants, order_for, paid, public_words
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Ticket, TicketStatus

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def test_a_refund_the_provider_rate_limits_for_a_while_is_paid_once_and_never_said_unconfirmed(sandbox, settings):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "RL-1001", 5000, sandbox)
    # More 429s than one pass's tries: the provider turns the refund away for longer than they last.
    sandbox.fault("rate_limited", count=int(settings.REFUND_PROVIDER_ATTEMPTS) + 2)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Broken", body="Please refund order RL-1001, it arrived broken."
    )

    first = advance(ticket.pk)

    words = " ".join(public_words(ticket))
    assert "couldn't confirm" not in words and "could not be completed" not in words, words
    ticket.refresh_from_db()
    assert ticket.status != TicketStatus.WITH_HUMAN, (first, ticket.status)
    (refund,) = Refund.objects.filter(ticket=ticket)
    assert refund.status == RefundStatus.SUBMITTED and refund.escalated_at is None, (refund.status, refund.error)
    assert paid(sandbox, order) == []

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
