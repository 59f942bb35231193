"""``verify_state`` checks the manifest's counts against the rows the bundle carries.

The manifest's ``counts`` (what the report's "counts" line shows, and what an operator compares with
the database left behind) were printed as they were written, under "ok": a manifest saying 5
messages for a bundle carrying 1 (edited, and signed again by someone holding the key, or written by
a release with a bug) passed with "ok counts: ... tickets.Message 5".
"""

from __future__ import annotations

import json

import pytest

from state import bundle
from tests.state.conftest import export, paused_ticket, verify, write_manifest

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def test_a_manifest_counting_rows_the_bundle_does_not_carry_is_reported(tmp_path):
    ticket, _ = paused_ticket("ann", number="S-1001")
    path = export(tmp_path, ticket, include_personal_data=True)
    manifest = json.loads((path / bundle.MANIFEST).read_text())
    carried = manifest["counts"]["tickets.Message"]
    manifest["counts"]["tickets.Message"] = carried + 4
    write_manifest(path, manifest)

    status, out = verify(path)

    assert status == 1, out
    assert f"tickets.Message: the manifest counts {carried + 4}, the bundle carries {carried}" in out, out


def test_a_bundle_as_written_has_its_counts_checked_ok(tmp_path):
    ticket, _ = paused_ticket("ann", number="S-1001")
    path = export(tmp_path, ticket, include_personal_data=True)

    status, out = verify(path)

    assert status == 0, out
    assert "ok     counts:" in out, out
