"""One damaged byte in a bundle's manifest is refused with the reason, by restore and by verify.

README ("Moving a deployment"): the manifest's own digest is checked, so no byte of the bundle goes
unchecked, and a bundle that cannot be trusted is refused with the reasons. A manifest that does
not match its digest is refused there and then (nothing it lists is read); one whose digest was
rewritten to match (a forged bundle) has each part entry's shape checked before it is used: never
a traceback.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from state import bundle
from tests.state.conftest import export, paused_ticket
from tests.state.test_bundle import empty_the_ledger

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def _damage_one_byte(path, old: bytes, new: bytes, *, forged: bool = False) -> None:  # noqa: ANN001
    manifest = path / bundle.MANIFEST
    body = manifest.read_bytes()
    assert len(old) == len(new) and old in body
    manifest.write_bytes(body.replace(old, new, 1))  # damage: the digest file is left as written
    if forged:  # forgery: the digest rewritten to match
        (path / bundle.MANIFEST_DIGEST).write_text(f"{bundle.sha256(manifest.read_bytes())}  {bundle.MANIFEST}\n")


@pytest.mark.parametrize("forged", [False, True], ids=["damaged", "forged"])
@pytest.mark.parametrize("key", [b'"rows"', b'"sha256"', b'"file"'])
def test_restore_refuses_a_bundle_with_one_damaged_byte_in_its_manifest_with_a_clear_error(tmp_path, key, forged):
    ticket, _ = paused_ticket("alice")
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    _damage_one_byte(path, key, key[:2] + bytes([key[2] ^ 0x01]) + key[3:], forged=forged)

    try:
        call_command("restore_state", str(path), stdout=io.StringIO())
    except CommandError as exc:
        assert "cannot be trusted" in str(exc)
    except Exception as exc:  # noqa: BLE001
        pytest.fail(
            f"restore_state crashed with {type(exc).__name__}: {exc} on a bundle whose manifest has one damaged "
            "byte (its digest no longer matches); a damaged bundle must be refused with a clear error"
        )
    else:
        pytest.fail("a bundle whose manifest does not match its digest was restored")


@pytest.mark.parametrize("key", [b'"rows"', b'"sha256"', b'"file"'])
def test_verify_reports_a_bundle_with_one_damaged_byte_in_its_manifest_instead_of_crashing(tmp_path, key):
    ticket, _ = paused_ticket("alice")
    path = export(tmp_path, ticket, include_personal_data=True)
    _damage_one_byte(path, key, key[:2] + bytes([key[2] ^ 0x01]) + key[3:])

    out = io.StringIO()
    try:
        call_command("verify_state", str(path), stdout=out)
    except SystemExit as exit:
        assert exit.code == 1
    except Exception as exc:  # noqa: BLE001
        pytest.fail(
            f"verify_state crashed with {type(exc).__name__}: {exc} on a bundle whose manifest has one damaged "
            "byte; it must report the bundle as not whole (exit status 1)"
        )
    else:
        pytest.fail("verify_state passed a bundle whose manifest does not match its digest")
