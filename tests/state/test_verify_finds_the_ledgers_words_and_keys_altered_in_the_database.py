"""``verify_state --database`` fails a database whose ledger was altered since the bundle, not only one that
lost rows.

A customer's message, a tool call's name, arguments, idempotency key and replay policy, a refund's key,
amount and order are written once and never changed by the product. Altered in the database since the bundle
(by hand, or by a restore gone wrong), they were reported as "changed since the bundle (the work moved on)"
and the check passed: a message rewritten read as the customer's, and a refund call under another key would
be paid again by the provider, which deduplicates by the key. The columns the work does move on (a message's
handling by the agent, a call's status and result, a refund's status) stay notes.
"""

from __future__ import annotations

import pytest

from agents.models import Refund, ToolCall
from tests.state.conftest import export, paid_after_approval, verify
from tickets.models import AuthorKind, Message

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

ALTERATIONS = {
    "a customer's message": (
        lambda t: Message.objects.filter(ticket=t, author_kind=AuthorKind.CUSTOMER).update(body="I never asked"),
        "tickets.Message",
    ),
    "a refund call's idempotency key": (
        lambda t: ToolCall.objects.filter(ticket=t, name="issue_refund").update(idempotency_key="another-key"),
        "agents.ToolCall",
    ),
    "a refund call's arguments": (
        lambda t: ToolCall.objects.filter(ticket=t, name="issue_refund").update(arguments={"order_number": "X"}),
        "agents.ToolCall",
    ),
    # Recovery reads a call's replay policy from its row: an email (never repeated) that reads "safe" is sent
    # again by the worker that finds it interrupted.
    "a tool call's replay policy": (
        lambda t: ToolCall.objects.filter(ticket=t, name="issue_refund").update(replay_policy="safe"),
        "agents.ToolCall",
    ),
    # A call reads as needing a staff approval from its intent on (or from a later pause), never the other way:
    # one turned back, still to run, is carried out with no approval (agents.approval.may_execute).
    "a refund call's approval flag turned off": (
        lambda t: ToolCall.objects.filter(ticket=t, name="issue_refund").update(approval_required=False),
        "agents.ToolCall",
    ),
    "a refund's idempotency key": (
        lambda t: Refund.objects.filter(ticket=t).update(idempotency_key="another-key"),
        "agents.Refund",
    ),
}


@pytest.mark.parametrize("personal_data", [True, False], ids=["with personal data", "pseudonymised"])
@pytest.mark.parametrize("what", sorted(ALTERATIONS))
def test_verify_fails_a_database_whose_ledger_was_altered_since_the_bundle(tmp_path, sandbox, what, personal_data):  # noqa: ANN001
    ticket, _ = paid_after_approval(sandbox)
    path = export(tmp_path, ticket, include_personal_data=personal_data)
    assert verify(path, database=True)[0] == 0
    alter, label = ALTERATIONS[what]
    alter(ticket)

    status, report = verify(path, database=True)

    assert status == 1, report
    altered = [line for line in report.splitlines() if label in line and "changed since the bundle" not in line]
    assert altered, report


def test_the_work_moving_on_is_a_note_not_a_failure(tmp_path, sandbox):  # noqa: ANN001
    ticket, _ = paid_after_approval(sandbox)
    path = export(tmp_path, ticket, include_personal_data=True)
    Message.objects.filter(ticket=ticket).update(agent_handled_at=None)
    ToolCall.objects.filter(ticket=ticket, name="issue_refund").update(attempts=2)
    Refund.objects.filter(ticket=ticket).update(attempts=3)

    status, report = verify(path, database=True)

    assert status == 0, report
    assert "3 row(s) changed since the bundle" in report
