"""A state bundle is signed with STATE_BUNDLE_KEY, and only a bundle whose signature holds is restored.

README ("Moving a deployment"): export signs the manifest (which holds every part's SHA-256) with an
HMAC-SHA256 under the key both deployments share; restore and verify refuse a bundle whose signature
does not hold (another key, a byte changed anywhere, a forged manifest or signature) and one without a
signature, or whose signature cannot be checked here, unless ``--allow-unsigned``: then it is read, and
the rights it gives are printed loudly. Export refuses to write without the key unless told the same.

What broke: a bundle's digests were its own. Anyone who could hand an operator a file could add a
superuser (or give a login the right to decide approvals), write digests to match, and restore made it.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from state import bundle, signature
from tests.conftest import OTHER_STATE_BUNDLE_KEY, STATE_BUNDLE_KEY
from tests.state.conftest import bundle_bytes, export, paused_ticket, rewrite_part, sign, verify, write_manifest
from tests.state.test_bundle import empty_the_ledger, ledger_counts, restore
from tickets.models import Ticket

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

MALLORY = {
    "username": "mallory",
    "is_staff": True,
    "is_superuser": True,
    "is_active": True,
    "groups": [],
    "permissions": ["approvals.decide_approval"],
}


def users_here() -> int:
    return get_user_model().objects.count()


def assert_refused(path: Path, why: str, **options: object) -> None:
    """Restore refuses the bundle with ``why`` among its reasons and writes nothing; verify fails it."""
    counts, users = ledger_counts(), users_here()
    with pytest.raises(CommandError) as refused:
        restore(path, **options)
    assert "cannot be trusted" in str(refused.value) and why in str(refused.value), str(refused.value)
    assert ledger_counts() == counts and users_here() == users
    status, out = verify(path, **options)
    assert status == 1 and why in out, out


def test_a_bundle_signed_with_a_key_is_restored_where_the_same_key_is_set(tmp_path):
    ticket, _ = paused_ticket()
    out = io.StringIO()
    path = tmp_path / "signed.tar"
    call_command("export_state", "--ticket", str(ticket.pk), output=str(path), include_personal_data=True, stdout=out)
    key_id = signature.key_id(STATE_BUNDLE_KEY.encode())
    assert f"Signed with STATE_BUNDLE_KEY (key id {key_id})" in out.getvalue()
    empty_the_ledger()

    status, report = verify(path)
    assert status == 0, report
    assert f"ok     signature: HMAC-SHA256 of manifest.json holds under STATE_BUNDLE_KEY (key id {key_id})" in report
    assert "!!!" not in report
    restored = restore(path)

    assert Ticket.objects.filter(pk=ticket.pk).exists()
    assert "NOT AUTHENTICATED" not in restored


def test_the_key_is_never_in_the_bundle_only_its_name(tmp_path):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)

    assert STATE_BUNDLE_KEY.encode() not in bundle_bytes(path)
    manifest = json.loads((path / bundle.MANIFEST).read_text())
    assert "STATE_BUNDLE_KEY" in manifest["secrets"]["not_included"]


def test_a_bundle_signed_with_another_key_is_refused_even_with_the_unsigned_flag(tmp_path, settings):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    settings.STATE_BUNDLE_KEY = OTHER_STATE_BUNDLE_KEY

    ours, theirs = (signature.key_id(key.encode()) for key in (OTHER_STATE_BUNDLE_KEY, STATE_BUNDLE_KEY))
    why = f"names the key id {theirs}, this deployment's STATE_BUNDLE_KEY is {ours}"
    assert_refused(path, why)
    assert_refused(path, why, allow_unsigned=True)
    assert not Ticket.objects.exists()


def _members(path: Path) -> list[str]:
    return sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file() and p.stat().st_size)


def test_one_byte_changed_in_any_member_is_refused(tmp_path):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    members = _members(path)
    assert {bundle.MANIFEST, bundle.MANIFEST_DIGEST, bundle.SIGNATURE} <= set(members)
    assert any(m.startswith("parts/") for m in members)

    for member in members:
        size = (path / member).stat().st_size
        for at in sorted({0, size // 2, size - 1}):
            changed = tmp_path / f"changed-{member.replace('/', '-')}-{at}"
            shutil.copytree(path, changed)
            data = bytearray((changed / member).read_bytes())
            data[at] ^= 0x01
            (changed / member).write_bytes(bytes(data))
            with pytest.raises(CommandError, match="cannot be trusted"):
                restore(changed, allow_unsigned=True)
            assert verify(changed, allow_unsigned=True)[0] == 1, f"{member} byte {at}"
    assert ledger_counts() == {label: 0 for label in ledger_counts()} and users_here() == 0


def _forge(path: Path) -> bytes:
    """Give the signed bundle at ``path`` a superuser, its digests written again to match; returns the
    signature it was exported with (the forger has no key: what they put in its place is theirs)."""
    exported = (path / bundle.SIGNATURE).read_bytes()
    rewrite_part(path, "auth.User", lambda rows: [*rows, MALLORY])
    return exported


def _other_key_under_our_id(path: Path, exported: bytes) -> bytes:
    """An HMAC under another key, in a signature file that names this deployment's key id."""
    forged = json.loads(signature.sign((path / bundle.MANIFEST).read_bytes(), OTHER_STATE_BUNDLE_KEY.encode()))
    forged["key_id"] = json.loads(exported)["key_id"]
    return (json.dumps(forged, sort_keys=True, indent=2) + "\n").encode()


SIGNATURES = {
    "the one it was exported with": (lambda path, exported: exported, "was changed after it was signed"),
    "one under another key": (
        lambda path, exported: signature.sign((path / bundle.MANIFEST).read_bytes(), OTHER_STATE_BUNDLE_KEY.encode()),
        "the bundle was signed with another key, or forged",
    ),
    "one under another key, naming this key's id": (_other_key_under_our_id, "the signature was forged"),
    "one of all zeros": (
        lambda path, exported: exported.replace(json.loads(exported)["hmac"].encode(), b"0" * 64),
        "the signature was forged",
    ),
    "a file that is not a signature": (lambda path, exported: b"trust me\n", "is not a signature this release writes"),
    # JSON nested deeper than the parser recurses (a RecursionError, not a ValueError): a traceback before.
    "a file nested deeper than a parser goes": (
        lambda path, exported: b"[" * 100_000,
        "is not a signature this release writes",
    ),
}


@pytest.mark.parametrize("forged", list(SIGNATURES))
def test_a_forged_superuser_with_digests_that_match_is_refused_whatever_signature_it_carries(tmp_path, forged):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    exported = _forge(path)
    make, why = SIGNATURES[forged]
    (path / bundle.SIGNATURE).write_bytes(make(path, exported))

    assert_refused(path, why)
    assert_refused(path, why, allow_unsigned=True)  # the flag accepts no signature, never a false one
    assert not get_user_model().objects.filter(username="mallory").exists()


def test_a_forged_bundle_without_its_signature_is_refused_without_the_flag(tmp_path):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    _forge(path)
    (path / bundle.SIGNATURE).unlink()

    assert_refused(path, "the bundle is not signed")
    assert not get_user_model().objects.filter(username="mallory").exists()


def test_with_the_flag_an_unsigned_bundle_is_restored_and_the_rights_it_gives_are_printed(tmp_path):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    _forge(path)
    (path / bundle.SIGNATURE).unlink()

    status, report = verify(path, allow_unsigned=True)
    assert status == 0, report
    assert "!!! NOT AUTHENTICATED: the bundle is not signed" in report, report
    assert "!!!   mallory: superuser, staff status, approvals.decide_approval" in report, report
    out = restore(path, allow_unsigned=True)

    assert "!!! NOT AUTHENTICATED: the bundle is not signed" in out, out
    assert "!!!   mallory: superuser, staff status, approvals.decide_approval" in out, out
    assert get_user_model().objects.get(username="mallory").is_superuser  # what the operator accepted
    assert Ticket.objects.filter(pk=ticket.pk).exists()


def test_export_without_a_key_is_refused_unless_told_to_write_the_bundle_unsigned(tmp_path, settings):
    ticket, _ = paused_ticket()
    settings.STATE_BUNDLE_KEY = ""

    with pytest.raises(CommandError, match="STATE_BUNDLE_KEY is not set: the bundle cannot be signed"):
        export(tmp_path, ticket)
    assert not (tmp_path / "bundle").exists()
    out = io.StringIO()
    path = tmp_path / "unsigned"
    call_command("export_state", "--ticket", str(ticket.pk), "--allow-unsigned", output=str(path), stdout=out)
    assert "WARNING: NOT SIGNED (STATE_BUNDLE_KEY is not set)" in out.getvalue()
    assert not (path / bundle.SIGNATURE).exists()
    empty_the_ledger()

    assert_refused(path, "the bundle is not signed")
    settings.STATE_BUNDLE_KEY = STATE_BUNDLE_KEY  # the deployment it moves to has a key: still not signed
    assert_refused(path, "the bundle is not signed")
    restored = restore(path, allow_unsigned=True)
    assert "!!! It created no login with any right" in restored, restored
    assert Ticket.objects.filter(pk=ticket.pk).exists()


def test_a_signed_bundle_where_no_key_is_set_is_read_only_with_the_flag(tmp_path, settings):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    settings.STATE_BUNDLE_KEY = ""

    assert_refused(path, "STATE_BUNDLE_KEY is not set here: its signature cannot be checked")
    out = restore(path, allow_unsigned=True)
    assert "!!! NOT AUTHENTICATED: the bundle is signed" in out and "cannot be checked" in out, out
    assert Ticket.objects.filter(pk=ticket.pk).exists()


def test_a_bundle_of_format_2_is_read_only_with_the_flag(tmp_path):
    """Format 2, the one before, was never signed."""
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    manifest = json.loads((path / bundle.MANIFEST).read_text())
    write_manifest(path, {**manifest, "format_version": 2}, signed=False)
    empty_the_ledger()

    assert_refused(path, "the bundle is not signed")
    assert verify(path, allow_unsigned=True)[0] == 0
    restore(path, allow_unsigned=True)
    assert Ticket.objects.filter(pk=ticket.pk).exists()


NESTED = b"[" * 100_000


@pytest.mark.parametrize("where", ["manifest", "part"])
def test_an_unsigned_bundle_nested_deeper_than_a_parser_goes_is_refused_not_a_traceback(tmp_path, where):
    """Read with --allow-unsigned, a bundle anyone could have written: a manifest or a part line of JSON
    nested deep enough stops the parser with a RecursionError, not the ValueError it was read for."""
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    if where == "manifest":
        (path / bundle.MANIFEST).write_bytes(NESTED)
        sign(path, key=None)
        why = "manifest.json is not JSON"
    else:
        manifest = json.loads((path / bundle.MANIFEST).read_text())
        entry = next(p for p in manifest["parts"] if p["label"] == "tickets.Ticket")
        (path / entry["file"]).write_bytes(NESTED + b"\n")
        entry.update(sha256=bundle.sha256(NESTED + b"\n"), rows=1)
        write_manifest(path, manifest, signed=False)
        why = "parts/tickets.Ticket.jsonl: line 1 is not a JSON row"

    assert_refused(path, why, allow_unsigned=True)


def test_with_the_flag_the_rules_an_unsigned_bundle_puts_in_force_are_printed_too(tmp_path):
    """A deployment with no active agent profile version makes the bundle's active: a forged one that
    needs no approval below a million dollars would pay any refund without one, unsaid."""
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    lax_policy = {"refund_threshold_cents": 100_000_000}
    rewrite_part(path, "agents.AgentProfile", lambda rows: [{**r, "approval_policy": lax_policy} for r in rows])
    manifest = json.loads((path / bundle.MANIFEST).read_text())
    manifest["active_profile"]["approval_policy"] = lax_policy
    write_manifest(path, manifest, signed=False)
    lax = "refunds above $1,000,000.00 per order need an approval"

    status, report = verify(path, allow_unsigned=True)
    assert status == 0 and "!!! Restored where no agent profile version is active" in report and lax in report, report
    out = restore(path, allow_unsigned=True)

    assert "!!! It made its own agent profile version active" in out and lax in out, out
