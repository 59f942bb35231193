"""Helpers for the state bundle tests: a ticket paused on a refund approval, and bundles on disk."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from agents.models import RunStatus
from agents.runner import advance
from state import bundle, signature
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import Order, Ticket


@pytest.fixture(autouse=True)
def _bundles_are_signed(state_bundle_key: str) -> None:
    """Every bundle of these tests is exported and read under the same ``STATE_BUNDLE_KEY``, as between two
    deployments configured alike (tests/state/test_signed_bundles.py changes or removes it)."""


def paused_ticket(name: str = "", number: str = "S-1001", total_cents: int = 4999) -> tuple[Ticket, Order]:
    """A flagged customer asks for a refund: the agent looks the order up and pauses for a staff approval."""
    customer = make_customer(name, flagged=True)
    order = make_order(customer, number=number, total_cents=total_cents)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject=f"Refund for {number}", body=f"Please refund order {number}, it arrived broken"
    )
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    return ticket, order


def paid_after_approval(sandbox) -> tuple[Ticket, Order]:  # noqa: ANN001
    """``paused_ticket``, approved by staff: the refund is paid (succeeded at the sandbox)."""
    from agents.models import Refund
    from approvals import services as approval_services
    from approvals.models import ApprovalRequest
    from tests.approvals.conftest import make_staff

    ticket, order = paused_ticket()
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(
        approval_id=approval.pk, user=make_staff("approves", can_decide=True), approve=True
    )
    advance(ticket.pk)
    assert Refund.objects.get(ticket=ticket).status == "succeeded"
    return ticket, order


def export(tmp_path: Path, *tickets: Ticket, name: str = "bundle", **options: object) -> Path:
    output = tmp_path / name
    args = [arg for t in tickets for arg in ("--ticket", str(t.pk))]
    call_command("export_state", *args, output=str(output), stdout=io.StringIO(), **options)
    return output


def verify(path: Path, *, database: bool = False, allow_unsigned: bool = False) -> tuple[int, str]:
    """``verify_state``'s exit status and report."""
    out = io.StringIO()
    try:
        call_command("verify_state", str(path), database=database, allow_unsigned=allow_unsigned, stdout=out)
    except SystemExit as exit:
        return int(exit.code), out.getvalue()
    return 0, out.getvalue()


def bundle_bytes(path: Path) -> bytes:
    """Every byte of a directory bundle, for searching."""
    return b"".join(p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file())


def rewrite_part(path: Path, label: str, change) -> None:  # noqa: ANN001
    """Change a part's rows and write digests that match, signed again with this deployment's key: a bundle
    consistent with itself, but forged by someone who holds the key (or written by a release with a bug).
    The checks behind the signature are what refuse it."""
    manifest = json.loads((path / bundle.MANIFEST).read_text())
    entry = next(p for p in manifest["parts"] if p["label"] == label)
    rows = bundle.decode_rows((path / entry["file"]).read_bytes())
    data = bundle.encode_rows(change(rows))
    (path / entry["file"]).write_bytes(data)
    entry.update(sha256=bundle.sha256(data), rows=data.count(b"\n"))
    manifest["counts"][label] = entry["rows"]
    write_manifest(path, manifest)


def write_manifest(path: Path, manifest: dict, *, signed: bool = True) -> None:
    """Write ``manifest`` and its digest; signed with this deployment's key (as if by someone holding it),
    or with no signature at all (``signed=False``: as anyone can, or as a release before signatures)."""
    (path / bundle.MANIFEST).write_bytes(bundle.manifest_bytes(manifest))
    sign(path, key=signature.configured_key() if signed else None)


def sign(path: Path, *, key: bytes | None) -> None:
    """Write the directory bundle's ``manifest.sha256`` and ``manifest.hmac`` again for its manifest as it
    is: signed with ``key``, or with no signature when None."""
    body = (path / bundle.MANIFEST).read_bytes()
    (path / bundle.MANIFEST_DIGEST).write_bytes(bundle.manifest_digest_bytes(body))
    if key is None:
        (path / bundle.SIGNATURE).unlink(missing_ok=True)
    else:
        (path / bundle.SIGNATURE).write_bytes(signature.sign(body, key))
