"""A bundle path that cannot be read (a name too long for the system here; a file or directory the
command's user may not read) is refused with the reason, not a traceback, and nothing is written."""

from __future__ import annotations

import pytest
from django.core.management.base import CommandError

from tests.state.conftest import verify
from tests.state.test_bundle import ledger_counts, restore

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def test_restore_refuses_a_path_that_cannot_be_read_with_its_reason(tmp_path):
    path = tmp_path / ("bundle-" + "x" * 300 + ".tar")  # past the 255 bytes a name may have
    counts = ledger_counts()

    with pytest.raises(CommandError, match="File name too long"):
        restore(path)
    assert ledger_counts() == counts


def test_verify_reports_a_path_that_cannot_be_read(tmp_path):
    status, out = verify(tmp_path / ("bundle-" + "x" * 300 + ".tar"))

    assert status == 1 and "File name too long" in out, out
