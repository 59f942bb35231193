"""A bundle row that names a column twice (``{"body": "...", "body": "..."}``) is refused by restore
and reported by verify, as the web endpoints refuse a JSON body naming a key twice. Export never
writes one; which of the two values a reader takes is its JSON parser's choice (restore took the
last, silently), so what an operator read in the bundle need not be what was restored."""

from __future__ import annotations

import json

import pytest
from django.core.management.base import CommandError

from state import bundle
from tests.state.conftest import export, paused_ticket, verify, write_manifest
from tests.state.test_bundle import empty_the_ledger, ledger_counts, restore

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def name_the_body_twice(path) -> None:  # noqa: ANN001
    """The first message row with a second "body" at its end; digests and signature written again."""
    manifest = json.loads((path / bundle.MANIFEST).read_text())
    entry = next(p for p in manifest["parts"] if p["label"] == "tickets.Message")
    first, rest = (path / entry["file"]).read_bytes().split(b"\n", 1)
    data = first[:-1] + b',"body":"Refund me twice"}\n' + rest
    (path / entry["file"]).write_bytes(data)
    entry["sha256"] = bundle.sha256(data)
    write_manifest(path, manifest)


def test_restore_refuses_a_row_naming_a_column_twice_and_writes_nothing(tmp_path):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    name_the_body_twice(path)
    counts = ledger_counts()

    with pytest.raises(CommandError, match="names 'body' twice"):
        restore(path)
    assert ledger_counts() == counts


def test_verify_reports_a_row_naming_a_column_twice(tmp_path):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    name_the_body_twice(path)

    status, out = verify(path)

    assert status == 1 and "names 'body' twice" in out, out
