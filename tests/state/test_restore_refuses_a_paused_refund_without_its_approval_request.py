"""A bundle of a refund paused on a staff approval that lost its approval request (or the paused call
with it) is reported by ``verify_state`` and refused by ``restore_state``.

Before, verify said "Result: OK" and restore wrote the rest: the ticket came back pending approval,
its run waiting on an approval, and nothing on the approval dashboard for anyone to decide. The
worker rung for it had nothing to do (``idle``), and the sweeper left it: stuck for good. The bundle
is consistent with itself (each edited part's digest written again and the manifest signed), as by
a forger who holds the key or a release with a bug; the checks behind the signature must refuse it.
"""

from __future__ import annotations

import pytest
from django.core.management.base import CommandError

from agents.models import CallStatus, ToolCall
from tests.state.conftest import export, paused_ticket, rewrite_part, verify
from tests.state.test_bundle import empty_the_ledger, restore
from tickets.models import Ticket

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def test_a_paused_refund_whose_approval_request_was_cut_is_reported_and_not_restored(tmp_path):
    ticket, _ = paused_ticket("ann", number="S-1001")
    call = ToolCall.objects.get(ticket=ticket, status=CallStatus.AWAITING_APPROVAL)
    path = export(tmp_path, ticket, include_personal_data=True)
    rewrite_part(path, "approvals.ApprovalRequest", lambda rows: [])

    status, out = verify(path)
    assert status == 1, out
    assert f"tool call {call.pk} (issue_refund) awaits an approval that is not in the bundle" in out, out
    assert "names approvals.ApprovalRequest" in out, out  # its approval_requested event names it too
    empty_the_ledger(restart_keys=False)
    with pytest.raises(CommandError, match="awaits an approval that is not in the bundle"):
        restore(path)
    assert not Ticket.objects.exists()


def test_a_paused_refund_whose_call_and_request_were_cut_is_reported_and_not_restored(tmp_path):
    ticket, _ = paused_ticket("ann", number="S-1001")
    call = ToolCall.objects.get(ticket=ticket, status=CallStatus.AWAITING_APPROVAL)
    path = export(tmp_path, ticket, include_personal_data=True)
    rewrite_part(path, "approvals.ApprovalRequest", lambda rows: [])
    rewrite_part(path, "agents.ToolCall", lambda rows: [r for r in rows if r["id"] != call.pk])

    status, out = verify(path)
    assert status == 1 and f"names agents.ToolCall {call.pk}, which is not in the bundle" in out, out
    empty_the_ledger(restart_keys=False)
    with pytest.raises(CommandError, match=f"names agents.ToolCall {call.pk},"):
        restore(path)
    assert not Ticket.objects.exists()
