"""A refund the reconciler settled while the worker sending it again was away is not sent after all.

The worker carrying an approved refund died after its intent (submitted) and before the provider was
asked. Another worker took the run up and asked the provider about the payment before sending it
again under its key; while that read was on its way the worker was frozen (a paused VM) long enough
for its database session to be cut and its lease to expire. The reconciler then found the ticket
free, no refund under the key at the provider, and settled the refund as failed: the customer was
told it could not be completed, and a person was asked to check with the provider before refunding
again. The worker woke with the provider's answer in hand and sent the refund anyway: the money went
out on a refund the ledger, the customer and the person all read as not done. A refund is sent only
while its row is still this worker's to send (submitted, the lease held, the ticket the agent's).
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from agents import lease as lease_module
from agents import refunds as refund_module
from agents.models import CallStatus, Refund, RefundStatus, RunStatus, ToolCall
from agents.runner import advance
from approvals import services
from approvals.models import ApprovalRequest
from tests.agents.conftest import WorkerDied
from tests.agents.test_refund_stopped_after_its_worker_died import _as_a_killed_worker_leaves_it
from tests.approvals.conftest import make_staff
from tests.approvals.test_approvals import provider_refunds, refund_ticket
from tickets.models import AuthorKind, Message, Ticket, TicketStatus

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def _in_another_session(work) -> None:  # noqa: ANN001
    """Run ``work`` on a connection of its own (the reconciler's worker), and wait for it."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


def test_a_refund_the_reconciler_settled_while_its_worker_was_frozen_is_not_sent_when_it_wakes(sandbox, monkeypatch):  # noqa: ANN001
    ticket, order = refund_ticket(sandbox, number="F-1001")
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    approval = ApprovalRequest.objects.get(ticket=ticket)
    services.approval_decide(approval_id=approval.pk, user=make_staff("frozen-approver", can_decide=True), approve=True)

    provider = refund_module.provider()
    real_create, real_list = provider.create_refund, provider.list_refunds

    def dies_before_sending(**kwargs):  # noqa: ANN003, ANN202
        raise WorkerDied()

    monkeypatch.setattr(provider, "create_refund", dies_before_sending)
    with pytest.raises(WorkerDied):
        advance(ticket.pk)
    (refund,) = Refund.objects.filter(ticket=ticket)
    assert refund.status == RefundStatus.SUBMITTED
    _as_a_killed_worker_leaves_it(ticket.pk)
    monkeypatch.setattr(provider, "create_refund", real_create)

    settled: list[str] = []

    def frozen_while_reading(**kwargs):  # noqa: ANN003, ANN202
        read = real_list(**kwargs)
        if not settled and Refund.objects.get(pk=refund.pk).attempts >= 2:
            # Frozen with the answer on its way (its heartbeat too): its sessions cut, their locks let
            # go, its lease expired.
            heartbeat = lease_module._the_heartbeat()
            with heartbeat.changed:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                        "AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = %s "
                        "AND pid <> pg_backend_pid() "
                        # Advisory locks are the server's: another database's ticket of the same id is not this one.
                        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                        [lease_module.lock_key(ticket.pk)],
                    )
                    assert cursor.fetchall(), "no session held the ticket's lock"
                    cursor.execute(
                        "UPDATE agents_ticketlease SET expires_at = now() - interval '1 second' WHERE ticket_id = %s",
                        [ticket.pk],
                    )
                _in_another_session(
                    lambda: settled.append(
                        refund_module.refund_reconcile(refund=Refund.objects.get(pk=refund.pk), older_than_seconds=0)
                    )
                )
        return read

    monkeypatch.setattr(provider, "list_refunds", frozen_while_reading)
    try:
        advance(ticket.pk)
    except Exception:  # noqa: BLE001, S110 - the pass may end on its lost lease; the ledger says what happened
        pass

    assert settled == [RefundStatus.FAILED]  # the reconciler settled it while the worker was away
    problem = Message.objects.filter(ticket=ticket, client_msg_id__startswith=f"refund-told:{refund.pk}:")
    told = list(problem.values_list("body", flat=True))
    assert told, "the customer was not told the refund could not be completed"
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN
    paid = provider_refunds(sandbox, order)
    assert paid == [], (
        f"the refund was sent after the reconciler settled it failed and the customer read {told!r}: "
        f"{[(r['id'], r['amount']) for r in paid]}"
    )
    refund.refresh_from_db()
    assert refund.status == RefundStatus.FAILED and refund.provider_refund_id is None
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status != CallStatus.SUCCEEDED
    replies = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, is_public=True)
    agent_says = list(replies.values_list("body", flat=True))
    assert not any("refunded" in words.lower() for words in agent_says), agent_says
