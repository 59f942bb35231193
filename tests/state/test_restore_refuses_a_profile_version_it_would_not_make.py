"""A bundle edited by hand (by someone holding the key, or written by a release with a bug) is refused when
a profile version in it is one this deployment would never make: restore and verify check a version's content
as the admin's page does, not only each column's type.

A version whose approval policy held a threshold of "lots", a tool this release does not have, or the
request's own keys among its model parameters was restored as it was: the runs pinned to it then failed
in the worker at the refund's decision, the ticket going to a person, instead of the operator reading why at
the restore.
"""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from agents.models import AgentProfile
from state import bundle
from tests.state.conftest import export, paused_ticket, rewrite_part, verify, write_manifest
from tests.state.test_bundle import empty_the_ledger
from tickets.models import Ticket

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

EDITS = {
    "a threshold that is no amount": (
        lambda v: {**v, "approval_policy": {**v["approval_policy"], "refund_threshold_cents": "lots"}},
        "refund_threshold_cents",
    ),
    "a tool this release does not have": (
        lambda v: {**v, "tools": [*v["tools"], {"name": "wire_money", "requires_approval": False}]},
        "wire_money",
    ),
    "the request's own keys as parameters": (lambda v: {**v, "model_parameters": {"stream": False}}, "stream"),
    "an approval rule that is no yes or no": (
        lambda v: {**v, "tools": [{**t, "requires_approval": "false"} for t in v["tools"]]},
        "requires_approval",
    ),
}


def restore(path) -> str:  # noqa: ANN001
    out = io.StringIO()
    call_command("restore_state", str(path), stdout=out)
    return out.getvalue()


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_profile_version_the_admin_would_refuse_is_refused_by_restore_and_verify(tmp_path, edit):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    change, named = EDITS[edit]
    rewrite_part(path, "agents.AgentProfile", lambda rows: [change(row) for row in rows])
    empty_the_ledger()

    with pytest.raises(CommandError) as refused:
        restore(path)

    assert "agent profile version 1" in str(refused.value) and named in str(refused.value), str(refused.value)
    assert not Ticket.objects.exists() and not AgentProfile.objects.exists()
    assert not get_user_model().objects.exists()
    status, report = verify(path)
    assert status == 1 and named in report, report


def test_the_manifests_active_version_is_checked_as_a_versions_row_is(tmp_path):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    manifest = json.loads((path / bundle.MANIFEST).read_text())
    active = manifest["active_profile"]
    active["approval_policy"] = {**active["approval_policy"], "refund_threshold_cents": "lots"}
    write_manifest(path, manifest)
    empty_the_ledger()

    with pytest.raises(CommandError) as refused:
        restore(path)

    assert "refund_threshold_cents" in str(refused.value), str(refused.value)
    assert not Ticket.objects.exists() and not AgentProfile.objects.exists()
    status, report = verify(path)
    assert status == 1 and "active agent profile version" in report and "refund_threshold_cents" in report, report
