"""Bundles forged consistently (each edited part's digest rewritten, so the checksums hold) that
``verify`` must report and ``restore`` must refuse.

A refund's amount changed after it was paid under an approval (restored, the order would look
refunded by a cent and could be refunded again), a part left out (the refunds), a row twice, a step
that read its conversation at a timeline number that never existed, a manifest without a key this
release always writes (a traceback, before).
"""

from __future__ import annotations

import json

import pytest
from django.core.management.base import CommandError

from agents.models import Refund
from state import bundle
from tests.state.conftest import export, paid_after_approval, paused_ticket, rewrite_part, verify, write_manifest
from tests.state.test_bundle import empty_the_ledger, restore

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def test_a_paid_refund_whose_amount_was_changed_is_reported_and_not_restored(tmp_path, sandbox):  # noqa: ANN001
    ticket, _ = paid_after_approval(sandbox)
    path = export(tmp_path, ticket, include_personal_data=True)
    assert verify(path)[0] == 0
    rewrite_part(path, "agents.Refund", lambda rows: [{**r, "amount_cents": 1} for r in rows])

    status, out = verify(path)
    assert status == 1 and "every refund is the amount its call asked for" in out, out
    empty_the_ledger()
    with pytest.raises(CommandError, match="amount its call asked for"):
        restore(path)
    assert not Refund.objects.exists()


def test_a_bundle_without_its_refunds_part_is_reported(tmp_path, sandbox):  # noqa: ANN001
    ticket, _ = paid_after_approval(sandbox)
    path = export(tmp_path, ticket, include_personal_data=True)
    manifest = json.loads((path / bundle.MANIFEST).read_text())
    manifest["parts"] = [p for p in manifest["parts"] if p["label"] != "agents.Refund"]
    manifest["counts"].pop("agents.Refund")
    (path / "parts" / "agents.Refund.jsonl").unlink()
    write_manifest(path, manifest)

    status, out = verify(path)
    assert status == 1 and "does not carry agents.Refund" in out, out


def test_a_row_twice_is_reported(tmp_path):  # noqa: ANN001
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    rewrite_part(path, "approvals.ApprovalRequest", lambda rows: rows + rows)

    status, out = verify(path)
    assert status == 1 and "no row twice" in out, out


def test_a_step_read_at_a_number_past_its_timeline_is_reported(tmp_path):  # noqa: ANN001
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    rewrite_part(path, "agents.ModelStep", lambda rows: [{**r, "read_seq": 2_000_000_000} for r in rows])

    status, out = verify(path)
    assert status == 1 and "after its ticket's last" in out, out


@pytest.mark.parametrize("key", ["selection", "counts", "app", "tools", "personal_data"])
def test_a_manifest_without_a_key_is_reported_not_a_traceback(tmp_path, key):  # noqa: ANN001
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket)
    manifest = json.loads((path / bundle.MANIFEST).read_text())
    manifest.pop(key)
    write_manifest(path, manifest)

    status, out = verify(path)
    assert status == 1 and f"the manifest has no '{key}'" in out, out


def test_a_part_listed_twice_is_refused_not_read_from_its_first_entry(tmp_path, sandbox):  # noqa: ANN001
    """What broke: a manifest listing the refunds part twice, an empty file first, was read from its
    first entry: restored, the order showed nothing paid back and could be refunded again."""
    ticket, _ = paid_after_approval(sandbox)
    path = export(tmp_path, ticket, include_personal_data=True)
    (path / "parts" / "agents.Refund.empty.jsonl").write_bytes(b"")
    manifest = json.loads((path / bundle.MANIFEST).read_text())
    at = next(i for i, p in enumerate(manifest["parts"]) if p["label"] == "agents.Refund")
    manifest["parts"].insert(
        at,
        {"label": "agents.Refund", "file": "parts/agents.Refund.empty.jsonl", "rows": 0, "sha256": bundle.sha256(b"")},
    )
    write_manifest(path, manifest)

    status, out = verify(path)
    assert status == 1 and "agents.Refund is listed 2 times" in out, out
    empty_the_ledger()
    with pytest.raises(CommandError, match="agents.Refund is listed 2 times"):
        restore(path)
    assert not Refund.objects.exists()


def test_a_paid_refund_call_whose_refund_row_was_cut_is_reported_and_not_restored(tmp_path, sandbox):  # noqa: ANN001
    """What broke: the refunds part kept but its rows cut (digests rewritten) passed verify: the call
    says the refund was paid, the bundle holds no refund, and restored, the order could be refunded again."""
    ticket, _ = paid_after_approval(sandbox)
    path = export(tmp_path, ticket, include_personal_data=True)
    rewrite_part(path, "agents.Refund", lambda rows: [])

    status, out = verify(path)
    assert status == 1 and "every refund call that ran has its refund" in out, out
    empty_the_ledger()
    with pytest.raises(CommandError, match="has no refund in the bundle"):
        restore(path)
    assert not Refund.objects.exists()
