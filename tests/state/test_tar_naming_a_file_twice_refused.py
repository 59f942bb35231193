"""A .tar bundle that holds a file under one name twice is refused by restore and reported by
verify. Export writes each file once; with two, which one a reader takes is its choice (restore read
the last, silently; ``tar -xOf`` prints both, an archive viewer may show the first), so what an
operator looked at need not be what was checked and restored."""

from __future__ import annotations

import io
import tarfile

import pytest
from django.core.management.base import CommandError

from tests.state.conftest import export, paused_ticket, verify
from tests.state.test_bundle import empty_the_ledger, ledger_counts, restore

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def with_a_first_copy(path, tmp_path, name: str, data: bytes):  # noqa: ANN001, ANN201
    """The bundle's .tar with another file of the same ``name`` in front of its own."""
    doubled = tmp_path / "doubled.tar"
    with tarfile.open(path) as source, tarfile.open(doubled, "w") as target:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        target.addfile(info, io.BytesIO(data))
        for member in source.getmembers():
            target.addfile(member, source.extractfile(member))
    return doubled


def test_restore_refuses_a_tar_holding_a_file_twice_and_writes_nothing(tmp_path):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, name="bundle.tar", include_personal_data=True)
    empty_the_ledger()
    doubled = with_a_first_copy(path, tmp_path, "parts/tickets.Message.jsonl", b'{"body": "another story"}\n')
    counts = ledger_counts()

    with pytest.raises(CommandError, match="parts/tickets.Message.jsonl is in the archive 2 times"):
        restore(doubled)
    assert ledger_counts() == counts


def test_verify_reports_a_tar_holding_a_file_twice(tmp_path):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, name="bundle.tar", include_personal_data=True)
    doubled = with_a_first_copy(path, tmp_path, "manifest.json", b"{}\n")

    status, out = verify(doubled)

    assert status == 1 and "manifest.json is in the archive 2 times" in out, out
