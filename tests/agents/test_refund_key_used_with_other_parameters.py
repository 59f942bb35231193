"""A refund the provider answers "this key was used with other parameters" is not told as refused.

Stripe's 400 idempotency_error says a request under the key was made before, with other parameters:
the provider has the first request's outcome, a refund among them. Read as a refusal, the refund was
failed and given up on at once: the customer read that it "could not be completed" and the ticket went
to a person to check it, while the provider held it paid (the reconciler recorded it paid hours later).
Here a try is made again with other metadata (as by a worker of a release that sends more) after the
first was stored and answered with a 500, the look-up between the two getting no answer. The outcome is
unknown, not refused: the refund is asked about under its key again, and found paid.
"""

from __future__ import annotations

from typing import Any

import pytest

import agents.refunds as refunds_module
from agents.models import CallStatus, Refund, RefundStatus, ToolCall
from agents.runner import advance
from payments.provider import PaymentProvider, ProviderRefund
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


class _NextRelease(PaymentProvider):
    """Sends its tries after the first with one metadata entry more (a release that sends more). The first
    is stored and answered with a 500, and the look-up after it gets no answer."""

    def __init__(self, sandbox: Any) -> None:
        super().__init__()
        self.sandbox, self.tries = sandbox, 0

    def create_refund(self, *, metadata: dict[str, str], **kwargs: Any) -> ProviderRefund:
        self.tries += 1
        if self.tries == 1:
            self.sandbox.fault("error_after_commit")
            self.sandbox.fault("error_before_commit", method="GET", path="/v1/refunds")
        else:
            metadata = {**metadata, "release": "next"}
        return super().create_refund(metadata=metadata, **kwargs)


def test_a_try_answered_key_used_with_other_parameters_is_asked_about_again_and_found_paid(sandbox, settings):  # noqa: ANN001
    settings.REFUND_RETRY_FIRST_WAIT_MS = 0
    settings.REFUND_RETRY_MAX_WAIT_MS = 0
    customer = make_customer()
    order = make_order(customer, number="K-3301", total_cents=5000)
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    refunds_module._provider = _NextRelease(sandbox)

    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund order K-3301")
    advance(ticket.pk)

    refund = Refund.objects.get(ticket=ticket)
    told = list(Message.objects.filter(ticket=ticket, author_kind=AuthorKind.SYSTEM).values_list("body", flat=True))
    assert not any("could not be completed" in body for body in told), told
    assert refund.status == RefundStatus.SUCCEEDED, (refund.status, refund.error)
    assert ToolCall.objects.get(ticket=ticket, name="issue_refund").status == CallStatus.SUCCEEDED
    paid = [r for r in sandbox.refunds() if r["payment_intent"] == order.payment_reference]
    assert [(r["id"], r["amount"]) for r in paid] == [(refund.provider_refund_id, 5000)]
