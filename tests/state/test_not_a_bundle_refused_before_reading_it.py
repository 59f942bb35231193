"""A directory or a .tar that is not a state bundle (no manifest) is refused before any of its files is read.

The reader read every file under the path it was given, into memory, and only then looked for the manifest:
``restore_state /srv`` or ``verify_state .`` (the project, with its virtualenv) read the whole tree, gigabytes
of it, before saying "not a state bundle", or ran out of memory first. So did a backup .tar given by mistake.
"""

from __future__ import annotations

import io
import pathlib
import tarfile

import pytest
from django.core.management.base import CommandError

from tests.state.conftest import verify
from tests.state.test_bundle import ledger_counts, restore

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


@pytest.fixture
def files_read(monkeypatch):  # noqa: ANN001, ANN201
    """The names of the files read through ``pathlib`` or from a .tar while the test runs."""
    read: list[str] = []
    read_bytes, extractfile = pathlib.Path.read_bytes, tarfile.TarFile.extractfile

    def read_path(self):  # noqa: ANN001, ANN202
        read.append(self.name)
        return read_bytes(self)

    def read_member(self, member):  # noqa: ANN001, ANN202
        read.append(getattr(member, "name", member))
        return extractfile(self, member)

    monkeypatch.setattr(pathlib.Path, "read_bytes", read_path)
    monkeypatch.setattr(tarfile.TarFile, "extractfile", read_member)
    return read


def a_tree(tmp_path):  # noqa: ANN001, ANN201
    tree = tmp_path / "srv"
    (tree / "backups").mkdir(parents=True)
    (tree / "backups" / "database.dump").write_bytes(b"\0" * 4096)
    (tree / "notes.txt").write_text("not a bundle")
    return tree


def a_backup_tar(tmp_path):  # noqa: ANN001, ANN201
    path = tmp_path / "backup.tar"
    with tarfile.open(path, "w") as tar:
        for name in ("home/database.dump", "home/notes.txt"):
            info = tarfile.TarInfo(name)
            info.size = 4096
            tar.addfile(info, io.BytesIO(b"\0" * 4096))
    return path


@pytest.mark.parametrize("given", [a_tree, a_backup_tar], ids=["a directory", "a .tar"])
def test_restore_refuses_what_is_not_a_bundle_without_reading_its_files(tmp_path, files_read, given):
    path = given(tmp_path)
    counts = ledger_counts()

    with pytest.raises(CommandError, match="not a state bundle"):
        restore(path)
    assert files_read == []
    assert ledger_counts() == counts


@pytest.mark.parametrize("given", [a_tree, a_backup_tar], ids=["a directory", "a .tar"])
def test_verify_reports_what_is_not_a_bundle_without_reading_its_files(tmp_path, files_read, given):
    status, out = verify(given(tmp_path))

    assert status == 1 and "not a state bundle" in out, out
    assert files_read == []
