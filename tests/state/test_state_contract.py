"""The state contract end to end: a ticket paused on a refund approval moves to a fresh database,
is approved there and finished by a worker of that database, and the provider pays it once.

The payment sandbox keeps its records in its own schema of the test database, which this test
never empties: the provider outlives the move, as a real one does.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from agents.models import CallStatus, Refund, ToolCall
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest, ApprovalStatus
from tests import workers
from tests.approvals.conftest import make_staff
from tests.conftest import OTHER_STATE_BUNDLE_KEY, STATE_BUNDLE_KEY
from tests.state.conftest import export, paused_ticket, verify
from tests.workers import ROOT, Cluster, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(300)]

NEWER_PROMPT = "Restored deployment, profile version 2."
NEWER_PROFILE = (
    "from agents.profiles import profile_new_version; "
    f"print(profile_new_version(changes={{'system_prompt': {NEWER_PROMPT!r}}}, user=None).version)"
)
DECIDE = """
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from approvals.models import ApprovalRequest
from approvals.services import approval_decide
user = get_user_model().objects.create_user(username="approver-there", password="pw-for-tests-123", is_staff=True)
user.user_permissions.add(Permission.objects.get(codename="decide_approval"))
user = get_user_model().objects.get(pk=user.pk)
approval = ApprovalRequest.objects.get(ticket_id={ticket})
print("approved", approval_decide(approval_id=approval.pk, user=user, approve=True).status)
"""


def manage(cluster: Cluster, url: str, *args: str, key: str = STATE_BUNDLE_KEY) -> subprocess.CompletedProcess:
    """``manage.py`` in a process of its own, on the database at ``url``, whose ``STATE_BUNDLE_KEY`` is
    ``key`` (by default the one this deployment signs its bundles with)."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=cluster.env(DATABASE_URL=url, STATE_BUNDLE_KEY=key),
        capture_output=True,
        text=True,
        timeout=240,
    )


def query(url: str, sql: str, *params: object) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


@pytest.fixture
def fresh_database(cluster: Cluster) -> Iterator[str]:
    """A second database on the same server, migrated, with no ticket: where the bundle moves to."""
    name = f"{connection.settings_dict['NAME']}_restored"
    url = workers.test_database_url().rsplit("/", 1)[0] + f"/{name}"
    admin = workers.test_database_url().rsplit("/", 1)[0] + "/postgres"
    query(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    query(admin, f'CREATE DATABASE "{name}"')
    migrated = manage(cluster, url, "migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stderr
    yield url
    cluster.stop_all()  # its workers are connected to it
    query(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_paused_refund_moves_to_a_fresh_database_and_is_paid_once_there(sandbox, cluster, fresh_database, tmp_path):
    there = fresh_database
    ticket, order = paused_ticket(number="M-1001")
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    path = export(tmp_path, ticket, name="ticket.tar", include_personal_data=True)
    assert verify(path)[0] == 0
    status, before = verify(path, database=True)
    assert status == 0, before

    # A bundle with one byte changed is refused, and leaves nothing behind.
    tampered = tmp_path / "tampered.tar"
    shutil.copy(path, tampered)
    data = bytearray(tampered.read_bytes())
    data[data.find(b'"M-1001"') + 3] ^= 0x01
    tampered.write_bytes(bytes(data))
    refused = manage(cluster, there, "restore_state", str(tampered))
    assert refused.returncode != 0 and "cannot be trusted" in refused.stderr, refused.stderr
    assert manage(cluster, there, "verify_state", str(tampered)).returncode == 1
    assert query(there, "SELECT count(*) FROM tickets_ticket") == [(0,)]
    # So is the bundle as it was written, on a deployment whose STATE_BUNDLE_KEY is another one.
    elsewhere = manage(cluster, there, "restore_state", str(path), "--allow-unsigned", key=OTHER_STATE_BUNDLE_KEY)
    assert elsewhere.returncode != 0 and "the signature does not hold" in elsewhere.stderr, elsewhere.stderr
    assert query(there, "SELECT count(*) FROM tickets_ticket") == [(0,)]

    restored = manage(cluster, there, "restore_state", str(path))
    assert restored.returncode == 0, restored.stderr
    checked = manage(cluster, there, "verify_state", str(path), "--database")
    assert checked.returncode == 0, checked.stdout
    assert query(there, "SELECT status FROM tickets_ticket WHERE id = %s", ticket.pk) == [("pending_approval",)]
    assert query(there, "SELECT idempotency_key, status FROM agents_toolcall WHERE id = %s", call.pk) == [
        (call.idempotency_key, CallStatus.AWAITING_APPROVAL)
    ]
    assert query(there, "SELECT password LIKE '!%%' FROM auth_user WHERE username = %s", ticket.customer.user.username)[
        0
    ][0]

    # A newer profile version is made active on the new deployment: the restored run keeps its own.
    newer = manage(cluster, there, "shell", "-c", NEWER_PROFILE)
    assert newer.stdout.strip().endswith("2"), newer.stderr
    cluster.worker(DATABASE_URL=there)
    decided = manage(cluster, there, "shell", "-c", DECIDE.format(ticket=ticket.pk))
    assert "approved approved" in decided.stdout, decided.stderr
    wait_until(
        lambda: query(there, "SELECT status FROM agents_refund WHERE tool_call_id = %s", call.pk) == [("succeeded",)],
        timeout=60,
        what="the refund on the restored database",
        cluster=cluster,
    )
    at_provider = [r for r in sandbox.refunds() if r["payment_intent"] == order.payment_reference]
    assert len(at_provider) == 1 and at_provider[0]["amount"] == 4999
    assert at_provider[0]["metadata"]["idempotency_key"] == call.idempotency_key
    # The reply is the next step's, committed after the refund: on a busy machine it comes a moment later.
    replies_sql = "SELECT body FROM tickets_message WHERE ticket_id = %s AND author_kind = 'agent'"
    wait_until(
        lambda: any("$49.99" in body for (body,) in query(there, replies_sql, ticket.pk)),
        timeout=60,
        what="the agent's reply on the restored database",
        cluster=cluster,
    )
    pinned = "SELECT p.version FROM agents_agentrun r JOIN agents_agentprofile p ON p.id = r.profile_id"
    assert query(there, pinned + " WHERE r.ticket_id = %s", ticket.pk) == [(1,)]
    asked = query(there, "SELECT request_messages::text FROM agents_modelstep WHERE ticket_id = %s", ticket.pk)
    assert asked and not any(NEWER_PROMPT in text for (text,) in asked)
    after = manage(cluster, there, "verify_state", str(path), "--database")
    assert after.returncode == 0, after.stdout
    assert "changed since the bundle" in after.stdout

    # The old deployment still holds the paused ticket. Approved and run there too (a split brain),
    # it asks the provider under the same idempotency key, and the provider pays nothing more.
    assert not Refund.objects.filter(ticket=ticket).exists()
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(
        approval_id=approval.pk, user=make_staff("approver-here", can_decide=True), approve=True
    )
    advance(ticket.pk)
    assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalStatus.APPROVED
    assert Refund.objects.get(ticket=ticket).provider_refund_id == at_provider[0]["id"]
    assert len([r for r in sandbox.refunds() if r["payment_intent"] == order.payment_reference]) == 1

    # The same bundle again is refused: every row is already there.
    again = manage(cluster, there, "restore_state", str(path))
    assert again.returncode != 0 and f"tickets.Ticket {ticket.pk} is already in this database" in again.stderr
