"""A bundle whose paused refund reads as decided by someone who never decided it is refused.

``verify`` and ``restore`` judged approvals only on refunds that had already reached the provider. A
call still waiting for staff, edited to read "approved" for its exact arguments (the digests of the
edited part rewritten, so the checksums hold), passed both; the new deployment's sweeper rang the
ticket, and the agent paid the refund that no member of staff had approved.
"""

from __future__ import annotations

import pytest

from agents.calls import arguments_digest
from tests.state.conftest import export, paused_ticket, rewrite_part, verify
from tests.state.test_bundle import edited_bundle_pays_nothing

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def _approved_by_nobody(rows: list[dict]) -> list[dict]:
    return [
        {**r, "approval_decision": "approved", "approval_digest": arguments_digest(r["arguments"])}
        if r["approval_required"]
        else r
        for r in rows
    ]


def test_a_paused_refund_edited_to_read_approved_is_reported_and_not_restored(tmp_path, sandbox):
    ticket, order = paused_ticket()
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    path = export(tmp_path, ticket, include_personal_data=True)
    assert verify(path)[0] == 0
    rewrite_part(path, "agents.ToolCall", _approved_by_nobody)

    edited_bundle_pays_nothing(
        path,
        ticket,
        refused_for="approved",
        verify_says="no call carries an approval staff did not give",
        edited="paused refund was edited to read approved",
    )
