"""One damaged byte in a bundle's manifest is refused with the reason, by restore and by verify.

README ("Moving a deployment"): the manifest's own digest is checked, so no byte of the bundle goes
unchecked, and a bundle that cannot be trusted is refused with the reasons. A manifest that does
not match its digest is refused there and then (nothing it lists is read); one whose digest and
signature were rewritten to match (forged with the key) has each part entry's shape checked before
it is used: never a traceback.
"""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from state import bundle, signature
from tests.state.conftest import export, paused_ticket, sign, verify, write_manifest
from tests.state.test_bundle import empty_the_ledger, ledger_counts, restore

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def _damage_one_byte(path, old: bytes, new: bytes, *, forged: bool = False) -> None:  # noqa: ANN001
    manifest = path / bundle.MANIFEST
    body = manifest.read_bytes()
    assert len(old) == len(new) and old in body
    manifest.write_bytes(body.replace(old, new, 1))  # damage: the digest file is left as written
    if forged:  # forgery by someone who holds the key: the digest and the signature rewritten to match
        sign(path, key=signature.configured_key())


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


# A forged manifest (its digest rewritten to match) with a value of another type than this release writes.
WRONG_VALUES = {
    "app a text": ("app", "support"),
    "selection a list": ("selection", [1]),
    "tools a list": ("tools", []),
    "settings a list": ("settings", []),
    "secrets empty": ("secrets", {}),
    "counts a list": ("counts", []),
    "migrations a list": ("migrations", []),
    "migrations a text": ("migrations", "all of them"),
}


@pytest.mark.parametrize("what", list(WRONG_VALUES))
def test_a_manifest_value_of_the_wrong_type_is_refused_by_restore_and_reported_by_verify(tmp_path, what):
    """What broke: the manifest's values were used as they came (``manifest["app"].get``, ``.items()``):
    a forged manifest with a list or a text where an object belongs ended in a traceback."""
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    key, value = WRONG_VALUES[what]
    manifest = json.loads((path / bundle.MANIFEST).read_text())
    write_manifest(path, {**manifest, key: value})

    status, out = verify(path)
    assert status == 1 and f"the manifest's {key!r} is not what this release writes there" in out, out
    empty_the_ledger()
    with pytest.raises(CommandError, match="cannot be trusted"):
        restore(path)
    assert ledger_counts() == {label: 0 for label in ledger_counts()}


def test_a_bundle_with_a_table_of_a_later_release_and_no_app_is_refused(tmp_path):
    """What broke: the refusal of a table this release does not know names the release that wrote the
    bundle from the manifest's "app": without one, restore ended in a KeyError."""
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    (path / "parts" / "agents.Future.jsonl").write_bytes(b"")
    manifest = json.loads((path / bundle.MANIFEST).read_text())
    manifest.pop("app")
    future = {"label": "agents.Future", "file": "parts/agents.Future.jsonl", "rows": 0, "sha256": bundle.sha256(b"")}
    write_manifest(path, {**manifest, "parts": [*manifest["parts"], future]})
    empty_the_ledger()

    with pytest.raises(CommandError, match="the manifest has no 'app'"):
        restore(path)
    status, out = verify(path)
    assert status == 1 and "the manifest has no 'app'" in out, out


def test_verify_reports_a_table_of_a_later_release_instead_of_a_traceback(tmp_path):
    """What broke: verify looked up every part's table and ended in a KeyError on one it does not know."""
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    data = b'{"id":1}\n'
    (path / "parts" / "agents.Future.jsonl").write_bytes(data)
    manifest = json.loads((path / bundle.MANIFEST).read_text())
    future = {"label": "agents.Future", "file": "parts/agents.Future.jsonl", "rows": 1, "sha256": bundle.sha256(data)}
    write_manifest(path, {**manifest, "parts": [*manifest["parts"], future]})

    for database in (False, True):
        status, out = verify(path, database=database)
        assert status == 1 and "a table this release does not know (agents.Future)" in out, out
