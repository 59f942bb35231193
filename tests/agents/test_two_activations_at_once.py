"""Two members of staff make different profile versions active at the same moment, each from a list
that showed version 1 active: one of them is made active, the other is refused naming it.

The second activation waits for the row lock the first holds on version 1, the version it read as
active. When the first commits, version 1 is no longer active: the second's locked read found no
active version at all, took that as "nothing to compare", and made its version active over the one
just made, which its person never saw (the refusal of a stale list held only when the two did not
overlap). The same holds for a version saved from the profile page while another is made active.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import close_old_connections, connection, transaction

from agents.profiles import ActivationRefused, active_profile, profile_activate, profile_new_version

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def _waiting_on_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def _first_holds_until_second_waits(first, second) -> list:  # noqa: ANN001
    """``first`` runs in a transaction kept open until ``second`` (another thread, another session)
    waits on a lock; then it commits. Returns what ``second`` returned or raised."""
    outcome: list = []
    holding = threading.Event()
    let_go = threading.Event()

    def run_first() -> None:
        try:
            with transaction.atomic():
                first()
                holding.set()
                let_go.wait(20)
        finally:
            connection.close()

    def run_second() -> None:
        holding.wait(20)
        try:
            outcome.append(second())
        except Exception as exc:  # noqa: BLE001 - the outcome under test
            outcome.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run_first), threading.Thread(target=run_second)]
    for thread in threads:
        thread.start()
    holding.wait(20)
    deadline = time.monotonic() + 20
    while _waiting_on_a_lock() < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    let_go.set()
    for thread in threads:
        thread.join(30)
    close_old_connections()
    return outcome


def test_two_versions_made_active_at_once_from_lists_showing_version_1_one_is_refused(db):  # noqa: ANN001
    assert active_profile().version == 1
    mine = profile_new_version(changes={"system_prompt": "Mine."}, user=None, activate=False)  # version 2
    theirs = profile_new_version(changes={"system_prompt": "Theirs."}, user=None, activate=False)  # version 3

    outcome = _first_holds_until_second_waits(
        lambda: profile_activate(version=mine.version, user=None, active_seen=1),
        lambda: profile_activate(version=theirs.version, user=None, active_seen=1),
    )

    assert active_profile().version == mine.version, (
        f"version {active_profile().version} is active: the second activation, from a list that showed version 1, "
        f"was made over version {mine.version}, made active while it waited (it returned {outcome})"
    )
    assert len(outcome) == 1 and isinstance(outcome[0], ActivationRefused), outcome
    assert f"Version {mine.version} was made active since this list was read" in outcome[0].messages[0]


def test_a_version_saved_from_the_page_while_another_is_made_active_is_refused(admin_client):  # noqa: ANN001
    from django.test import Client

    from agents.models import AgentProfile

    opened = active_profile()  # version 1, opened on the page
    page = admin_client.get(f"/admin/agents/agentprofile/{opened.pk}/change/")
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in ["model", "model_parameters", "tools", "approval_policy"]}
    data.update(system_prompt="Edited on the page.", note="edit", make_active="on", active_version=1)
    user = page.wsgi_request.user
    theirs = profile_new_version(changes={"system_prompt": "A colleague's."}, user=None, activate=False)  # v2

    def save_the_page() -> int:
        client = Client()
        client.force_login(user)
        return client.post(f"/admin/agents/agentprofile/{opened.pk}/change/", data).status_code

    outcome = _first_holds_until_second_waits(
        lambda: profile_activate(version=theirs.version, user=None, active_seen=1), save_the_page
    )

    assert active_profile().version == theirs.version, (
        f"the page read while version 1 was active was saved as version {active_profile().version} and made "
        f"active over version {theirs.version}, made active while it was being saved (status {outcome})"
    )
    assert outcome == [200] and AgentProfile.objects.count() == 2, (outcome, AgentProfile.objects.count())
