"""A .tar bundle holding a sparse file is refused by restore and reported by verify, before the file is
read. Export writes plain files only; a sparse member of a few hundred bytes in the archive reads as
gigabytes of zeros, and the reader held them all in memory (a bundle of 10 KB took the process down)."""

from __future__ import annotations

import io
import tarfile

import pytest
from django.core.management.base import CommandError

from tests.state.conftest import export, paused_ticket, verify
from tests.state.test_bundle import empty_the_ledger, ledger_counts, restore

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

# What the sparse file says it holds: small for the test's sake (a real one can say terabytes).
SPARSE_BYTES = 64 * 1024 * 1024


def sparse_header(name: str, size: int) -> bytes:
    """The 512-byte header of an old GNU sparse file of ``size`` bytes of zeros that stores none of them."""
    info = tarfile.TarInfo(name)
    info.type = tarfile.GNUTYPE_SPARSE
    header = bytearray(info.tobuf(format=tarfile.GNU_FORMAT))
    header[386:398] = tarfile.itn(size, 12, tarfile.GNU_FORMAT)  # one empty chunk at the end: all a hole
    header[398:410] = tarfile.itn(0, 12, tarfile.GNU_FORMAT)
    header[483:495] = tarfile.itn(size, 12, tarfile.GNU_FORMAT)  # its real size
    header[148:156] = b" " * 8
    header[148:155] = b"%06o\0" % tarfile.calc_chksums(bytes(header))[0]
    return bytes(header)


def with_a_sparse_file(path, tmp_path):  # noqa: ANN001, ANN201
    """The bundle's .tar with a sparse file of ``SPARSE_BYTES`` in front of its own files."""
    sparse = tmp_path / "sparse.tar"
    with tarfile.open(path) as source:
        members = [(member, source.extractfile(member).read()) for member in source.getmembers()]
    with open(sparse, "wb") as out:
        out.write(sparse_header("parts/zeros.jsonl", SPARSE_BYTES))
        with tarfile.open(fileobj=out, mode="w") as target:
            for member, data in members:
                target.addfile(member, io.BytesIO(data))
    with tarfile.open(sparse) as check:  # what the reader reads: the file, whole
        assert check.getmember("parts/zeros.jsonl").size == SPARSE_BYTES
    return sparse


def test_restore_refuses_a_tar_holding_a_sparse_file_and_writes_nothing(tmp_path):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, name="bundle.tar", include_personal_data=True)
    empty_the_ledger()
    sparse = with_a_sparse_file(path, tmp_path)
    counts = ledger_counts()

    with pytest.raises(CommandError, match="parts/zeros.jsonl is not a plain file"):
        restore(sparse)
    assert ledger_counts() == counts


def test_verify_reports_a_tar_holding_a_sparse_file(tmp_path):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, name="bundle.tar", include_personal_data=True)

    status, out = verify(with_a_sparse_file(path, tmp_path))

    assert status == 1 and "parts/zeros.jsonl is not a plain file" in out, out
