"""A refund approved but not yet sent when the bundle was written, that the old deployment then paid,
is not paid a second time where the bundle is restored a day later.

README, "Refunds: the rules" and "Moving a deployment": idempotency keys are kept, so a refund run
again by the new deployment is deduplicated by the payment provider. Stripe forgets a key once it is
24 hours old: the restored worker's first try under the key is then a new refund. It asks the
provider what happened under the key before that first try, and records the refund it finds.
"""

from __future__ import annotations

import pytest
from django.db import connection

from agents.models import Refund, RefundStatus, RunStatus, ToolCall
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from payments.provider import PaymentProvider
from tests.agents.test_money_path import order_for, paid
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tests.state.conftest import export
from tests.state.test_bundle import empty_the_ledger, restore
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture(autouse=True)
def _quick_retries(settings):  # noqa: ANN001, ANN202
    settings.REFUND_RETRY_FIRST_WAIT_MS = 5
    settings.REFUND_RETRY_MAX_WAIT_MS = 20


def test_a_refund_the_old_deployment_paid_after_the_export_is_not_paid_again_a_day_later(sandbox, tmp_path):
    customer = make_customer(flagged=True)  # every refund of theirs is reviewed
    order = order_for(customer, "M-2401", 10000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $30.00 on order M-2401"
    )
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(
        approval_id=approval.pk, user=make_staff("approves", can_decide=True), approve=True
    )
    assert not Refund.objects.exists()  # approved, not sent yet

    path = export(tmp_path, ticket, name="moving.tar", include_personal_data=True)
    key = ToolCall.objects.get(ticket=ticket, name="issue_refund").idempotency_key

    advance(ticket.pk)  # the old deployment, still running, pays it under the call's key
    [first] = paid(sandbox, order)
    assert (first["amount"], first["metadata"]["idempotency_key"]) == (3000, key)

    # The new deployment, restored from the bundle more than a day later: Stripe has forgotten the key.
    empty_the_ledger()
    sandbox.expire_idempotency_keys(older_than_seconds=0)
    restore(path)
    advance(ticket.pk)

    assert [r["id"] for r in paid(sandbox, order)] == [first["id"]], (
        "the restored worker sent the refund again under a key the provider had forgotten, and the "
        "customer was refunded twice: its first try did not ask the provider what happened under the key"
    )
    refund = Refund.objects.get(idempotency_key=key)
    assert (refund.status, refund.provider_refund_id) == (RefundStatus.SUCCEEDED, first["id"])


class WorkerDied(BaseException):
    """The worker stops dead (no handler of ours catches it)."""


def test_a_refund_recorded_but_not_sent_when_exported_and_paid_by_the_old_deployment_is_not_paid_again(
    sandbox, tmp_path, monkeypatch
):
    """The bundle holds the refund's row (submitted: its request was about to go) and the old
    deployment's next worker sent it. Restored a day later, the recovery's look-up gets no answer, so
    the handler runs again under the call's key: its try asks the provider first, and finds it paid."""
    customer = make_customer()
    order = order_for(customer, "M-2402", 10000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $30.00 on order M-2402"
    )

    def dies_before_sending(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise WorkerDied()

    with monkeypatch.context() as patched:
        patched.setattr(PaymentProvider, "create_refund", dies_before_sending)
        with pytest.raises(WorkerDied):
            advance(ticket.pk)
    assert Refund.objects.get(ticket=ticket).status == RefundStatus.SUBMITTED and paid(sandbox, order) == []
    with connection.cursor() as cursor:  # as a killed worker leaves it: held by nobody alive, expired
        cursor.execute(
            "UPDATE agents_ticketlease SET owner = 'dead-worker', expires_at = now() - interval '1 second' "
            "WHERE ticket_id = %s",
            [ticket.pk],
        )
    path = export(tmp_path, ticket, name="moving.tar", include_personal_data=True)
    key = Refund.objects.get(ticket=ticket).idempotency_key

    advance(ticket.pk)  # the old deployment's next worker recovers the call and sends it
    [first] = paid(sandbox, order)
    assert first["metadata"]["idempotency_key"] == key

    empty_the_ledger()
    sandbox.expire_idempotency_keys(older_than_seconds=0)  # a day later
    restore(path)
    sandbox.fault("error_before_commit", method="GET", path="/v1/refunds*", count=1)  # recovery's look-up
    advance(ticket.pk)

    assert [r["id"] for r in paid(sandbox, order)] == [first["id"]], (
        "the restored worker sent the refund again under a key the provider had forgotten: its try did "
        "not ask the provider what happened under the key"
    )
    refund = Refund.objects.get(idempotency_key=key)
    assert (refund.status, refund.provider_refund_id) == (RefundStatus.SUCCEEDED, first["id"])


def _a_day_old(ticket) -> None:  # noqa: ANN001
    """The refund's call was decided more than a day ago (its intent, and so its key, are that old)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE agents_toolcall SET started_at = now() - interval '25 hours' WHERE ticket_id = %s", [ticket.pk]
        )


def test_a_refund_the_old_deployment_paid_is_not_sent_blind_when_the_look_ups_get_no_answer(sandbox, tmp_path):
    """Restored a day later, every look-up under the key gets no answer for a while (the provider's
    list of refunds fails, its creation does not): a key older than the provider keeps it is never
    sent without asking first. The refund is asked about again, and found paid once the look-up answers."""
    customer = make_customer(flagged=True)
    order = order_for(customer, "M-2403", 10000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $30.00 on order M-2403"
    )
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(
        approval_id=approval.pk, user=make_staff("approves-too", can_decide=True), approve=True
    )
    path = export(tmp_path, ticket, name="moving.tar", include_personal_data=True)
    advance(ticket.pk)  # the old deployment pays it
    [first] = paid(sandbox, order)

    empty_the_ledger()
    sandbox.expire_idempotency_keys(older_than_seconds=0)  # a day later
    restore(path)
    _a_day_old(ticket)
    sandbox.fault("error_before_commit", method="GET", path="/v1/refunds*", count=2)
    advance(ticket.pk)

    assert [r["id"] for r in paid(sandbox, order)] == [first["id"]], (
        "sent again, blind, under a key the provider had forgotten: the customer was refunded twice"
    )
    refund = Refund.objects.get(tool_call__ticket=ticket)
    assert (refund.status, refund.provider_refund_id) == (RefundStatus.SUCCEEDED, first["id"])


def test_a_refund_recorded_sent_a_day_ago_is_not_sent_blind_while_no_look_up_answers(sandbox, tmp_path):
    """Its row says submitted (the old deployment sent it after the export); restored a day later, the
    provider answers no look-up at all: nothing is sent, the ticket goes to a person with the refund
    uncertain, and the reconciler records it paid once the provider answers."""
    from agents.refunds import reconcile_open_refunds

    customer = make_customer()
    order = order_for(customer, "M-2404", 10000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $30.00 on order M-2404"
    )

    def dies_before_sending(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise WorkerDied()

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(PaymentProvider, "create_refund", dies_before_sending)
        with pytest.raises(WorkerDied):
            advance(ticket.pk)
    with connection.cursor() as cursor:  # as a killed worker leaves it: held by nobody alive, expired
        cursor.execute(
            "UPDATE agents_ticketlease SET owner = 'dead-worker', expires_at = now() - interval '1 second' "
            "WHERE ticket_id = %s",
            [ticket.pk],
        )
    path = export(tmp_path, ticket, name="moving.tar", include_personal_data=True)
    advance(ticket.pk)  # the old deployment's next worker sends it
    [first] = paid(sandbox, order)

    empty_the_ledger()
    sandbox.expire_idempotency_keys(older_than_seconds=0)
    restore(path)
    _a_day_old(ticket)
    sandbox.fault("error_before_commit", method="GET", path="/v1/refunds*", count=100)
    advance(ticket.pk)

    assert [r["id"] for r in paid(sandbox, order)] == [first["id"]], "sent again, blind: refunded twice"
    refund = Refund.objects.get(tool_call__ticket=ticket)
    assert refund.status == RefundStatus.UNCERTAIN

    sandbox.clear_faults()
    reconcile_open_refunds(older_than_seconds=0)
    refund.refresh_from_db()
    assert (refund.status, refund.provider_refund_id) == (RefundStatus.SUCCEEDED, first["id"])
    assert [r["id"] for r in paid(sandbox, order)] == [first["id"]]
