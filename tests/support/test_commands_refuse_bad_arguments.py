"""Management commands given arguments that make no sense print a clear error and exit non-zero,
writing nothing: a negative --older-than (reconcile_refunds read it as "now", and marked failed
every refund the provider had no record of yet), and an export to a path that cannot be written
(a traceback of FileExistsError or FileNotFoundError)."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from tests.conftest import make_customer
from tickets import services

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("value", ["-1", "-86400"])
def test_reconcile_refunds_refuses_a_negative_age(value):
    with pytest.raises(CommandError, match="older-than"):
        call_command("reconcile_refunds", "--older-than", value)


def test_an_export_under_a_file_is_refused_with_the_reason_and_leaves_nothing(tmp_path, state_bundle_key):
    services.ticket_open(customer=make_customer(), subject="Kettle", body="Where is my kettle?")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")

    for output in (blocker / "bundle", blocker / "bundle.tar"):
        with pytest.raises(CommandError, match="cannot write") as refused:
            call_command("export_state", "--all", "--output", str(output))
        assert str(output) in str(refused.value)

    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"] and blocker.read_text() == "not a directory"


def test_an_export_of_every_ticket_from_an_empty_database_says_there_are_none(tmp_path):
    """It said "with --open-only, every chosen ticket is resolved or closed" to a command without it."""
    with pytest.raises(CommandError, match="this database has no tickets"):
        call_command("export_state", "--all", "--output", str(tmp_path / "bundle"))
    assert list(tmp_path.iterdir()) == []
