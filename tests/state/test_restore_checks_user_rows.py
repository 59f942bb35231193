"""Restore checks the users part like every other part before it writes.

A damaged or forged row of ``parts/auth.User.jsonl`` (no groups, a staff flag that is not a boolean,
a row that is not an object) is refused with "Nothing was restored: <why>", not a traceback, and
nothing is written.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from tests.state.conftest import export, paused_ticket, rewrite_part
from tests.state.test_bundle import empty_the_ledger, ledger_counts, restore

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

DAMAGED_USER_ROWS = {
    "a user row without its groups": lambda rows: [{k: v for k, v in rows[0].items() if k != "groups"}, *rows[1:]],
    "a staff flag that is not a boolean": lambda rows: [{**rows[0], "is_staff": "yes"}, *rows[1:]],
    "a user row that is not an object": lambda rows: ["bob", *rows[1:]],
}
DAMAGED_TICKET_ROWS = {"a ticket row that is not an object": lambda rows: [42, *rows[1:]]}


@pytest.mark.parametrize("what", list(DAMAGED_USER_ROWS))
def test_restore_refuses_a_damaged_user_row_with_a_clear_error(tmp_path, what):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    rewrite_part(path, "auth.User", DAMAGED_USER_ROWS[what])
    counts = ledger_counts()

    with pytest.raises(CommandError, match="Nothing was restored|cannot be trusted"):
        restore(path)
    assert ledger_counts() == counts and not get_user_model().objects.exists()


def test_restore_refuses_a_row_that_is_not_an_object_in_any_part(tmp_path):  # noqa: ANN001
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    rewrite_part(path, "tickets.Ticket", DAMAGED_TICKET_ROWS["a ticket row that is not an object"])
    counts = ledger_counts()

    with pytest.raises(CommandError, match="a row that is not an object"):
        restore(path)
    assert ledger_counts() == counts
