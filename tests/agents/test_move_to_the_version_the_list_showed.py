"""The run list's "Move paused runs to the active profile version" moves them to the version the list
showed as active, or not at all: pressed from a list read before a colleague made another version active, it is
refused with a message naming both, and no run moves (it moved them to a version the person never
saw). And the version a run moves to is read under the run's lock: a version made active while the
move waited for the run is the one it lands on, not the one read before.
"""

from __future__ import annotations

import re
import threading
import time

import pytest
from django.db import connection, connections, transaction

from agents.models import AgentRun, RunStatus
from agents.profiles import active_profile, profile_activate, profile_new_version, run_move_to_active
from agents.runner import advance
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def paused_run() -> AgentRun:
    """A run waiting for a staff approval of a refund, on the version active now."""
    customer = make_customer()
    make_order(customer, total_cents=64900, number="M-1001")
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund my order M-1001, it stopped working"
    )
    advance(ticket.pk)
    run = AgentRun.objects.get(ticket=ticket)
    assert run.status == RunStatus.WAITING_APPROVAL
    return run


def version_listed(admin_client) -> str:  # noqa: ANN001
    """The active version the run list carries with its actions (its hidden field)."""
    page = admin_client.get("/admin/agents/agentrun/").content.decode()
    found = re.search(r'name="active_version" value="(\d+)"', page)
    assert found, "the run list does not say which version its move action moves runs to"
    return found.group(1)


def test_a_move_from_a_list_read_before_another_version_was_made_active_is_refused(admin_client):
    run = paused_run()  # on version 1
    profile_new_version(changes={"system_prompt": "Version 2."}, user=None)
    assert admin_client.get("/admin/agents/agentrun/").status_code == 200  # read while version 2 is active
    listed = "2"  # what the list sends back (test_the_list_says_which_version_is_active)
    profile_new_version(changes={"system_prompt": "Version 3, not seen."}, user=None)  # a colleague, meanwhile

    response = admin_client.post(
        "/admin/agents/agentrun/",
        {"action": "move_runs_to_active", "_selected_action": [str(run.pk)], "active_version": listed},
        follow=True,
    )

    page = response.content.decode()
    assert AgentRun.objects.get(pk=run.pk).profile.version == 1, "moved to a version the list never showed"
    assert "Version 3 was made active since this list was read (it showed version 2)" in page
    assert "No run was moved." in page
    # From the list as it is now, the move is done, to the version it shows.
    response = admin_client.post(
        "/admin/agents/agentrun/",
        {
            "action": "move_runs_to_active",
            "_selected_action": [str(run.pk)],
            "active_version": version_listed(admin_client),
        },
        follow=True,
    )
    assert "Moved 1 run(s) to version 3." in response.content.decode()
    assert AgentRun.objects.get(pk=run.pk).profile.version == 3


def test_the_list_says_which_version_is_active(admin_client):
    paused_run()
    profile_new_version(changes={"system_prompt": "Version 2."}, user=None)

    page = admin_client.get("/admin/agents/agentrun/").content.decode()

    assert version_listed(admin_client) == "2"
    assert "Active profile version: v2" in page


def _waiting_on_a_row_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' "
            "AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0] > 0


def test_the_version_is_read_under_the_runs_lock():
    run = paused_run()
    profile_new_version(changes={"system_prompt": "Version 2."}, user=None)
    v3 = profile_new_version(changes={"system_prompt": "Version 3."}, user=None, activate=False)
    assert active_profile().version == 2

    outcome: list = []

    def move() -> None:
        try:
            outcome.append(run_move_to_active(run=AgentRun.objects.get(pk=run.pk), user=None))
        finally:
            connections.close_all()

    with transaction.atomic():
        # The ticket's worker holds the run (or a colleague's move does) when the move arrives; version 3
        # is made active before it lets go.
        AgentRun.objects.select_for_update().get(pk=run.pk)
        moving = threading.Thread(target=move)
        moving.start()
        deadline = time.monotonic() + 20
        while not _waiting_on_a_row_lock() and moving.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        profile_activate(version=v3.version, user=None)
    moving.join(30)

    assert outcome == [True]
    assert AgentRun.objects.get(pk=run.pk).profile.version == 3, (
        "the move read the active version before it locked the run, and put it on a version no longer active"
    )
