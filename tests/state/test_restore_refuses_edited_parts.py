"""An edited bundle whose digests were written again to match: a part line that is not a JSON row,
or a row without one of its columns, is refused with the reason, and nothing is restored."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.migrations.loader import MigrationLoader

from agents.models import ToolCall
from state import bundle
from tests.state.conftest import export, paused_ticket, rewrite_part, verify, write_manifest
from tests.state.test_bundle import empty_the_ledger
from tickets.models import Ticket

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

DAMAGED_LINES = pytest.mark.parametrize(
    "damage",
    [b'{"id": 1, "subject": "cut short\n', b"\xff\xfe not utf-8\n"],
    ids=["a line cut short", "bytes that are not UTF-8"],
)


def restore(path) -> str:  # noqa: ANN001
    out = io.StringIO()
    call_command("restore_state", str(path), stdout=out)
    return out.getvalue()


def damage_tickets_part(path, data: bytes) -> None:  # noqa: ANN001
    manifest = json.loads((path / bundle.MANIFEST).read_text())
    entry = next(p for p in manifest["parts"] if p["label"] == "tickets.Ticket")
    (path / entry["file"]).write_bytes(data)
    entry.update(sha256=bundle.sha256(data), rows=data.count(b"\n"))
    write_manifest(path, manifest)


@DAMAGED_LINES
def test_restore_names_the_part_line_that_is_not_a_json_row(tmp_path, damage):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    damage_tickets_part(path, damage)

    with pytest.raises(CommandError, match=r"cannot be trusted:[\s\S]*parts/tickets.Ticket.jsonl: line 1 "):
        restore(path)
    assert not Ticket.objects.exists()


@DAMAGED_LINES
def test_verify_fails_the_bundle_naming_the_part_line_that_is_not_a_json_row(tmp_path, damage):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    damage_tickets_part(path, damage)

    status, out = verify(path)

    assert status == 1
    assert "FAILED checksums and format" in out
    assert "parts/tickets.Ticket.jsonl: line 1 is not a JSON row" in out


def test_restore_refuses_a_row_without_a_column_its_table_had_at_the_bundles_migrations(tmp_path):
    """Written at this database's migrations, every column is in every row: the column's default
    (approval_required=False) does not stand in for one an edit took out."""
    ticket, _ = paused_ticket()
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.approval_required
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    rewrite_part(
        path,
        "agents.ToolCall",
        lambda rows: [{k: v for k, v in r.items() if (r["id"], k) != (call.pk, "approval_required")} for r in rows],
    )

    with pytest.raises(CommandError, match=rf"Nothing was restored:[\s\S]*agents.ToolCall {call.pk}: no approval_req"):
        restore(path)
    assert not ToolCall.objects.exists()


def test_restore_lets_a_column_added_after_the_bundles_migrations_take_its_default(tmp_path):
    """A bundle written before the migration that added a column (ToolCall.confirmation_digest, by
    agents 0007) does not carry it: the row takes the column's default."""
    ticket, _ = paused_ticket()
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    rewrite_part(
        path, "agents.ToolCall", lambda rows: [{k: v for k, v in r.items() if k != "confirmation_digest"} for r in rows]
    )
    manifest = json.loads((path / bundle.MANIFEST).read_text())
    # The bundle's migrations: those applied before agents 0007, and no later one of another app that needs it.
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    later = {("agents", name) for name in manifest["migrations"]["agents"] if name >= "0007"}
    for app, names in manifest["migrations"].items():
        names[:] = [n for n in names if (app, n) not in later and not later & set(graph.forwards_plan((app, n)))]
    write_manifest(path, manifest)

    restore(path)

    assert ToolCall.objects.get(pk=call.pk).confirmation_digest == ""
