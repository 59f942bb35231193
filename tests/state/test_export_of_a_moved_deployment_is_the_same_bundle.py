"""Two exports of the same state are the same bytes, part for part (only the manifest's time and the release
that wrote it differ): also when the state is the one a bundle put in another database. The users part was
in the order of the logins before they were pseudonymised (and as the database's collation sorts them), so
the deployment a pseudonymised bundle moved to wrote its users in another order: the same rows, other bytes,
another digest, for the same tickets."""

from __future__ import annotations

import pytest

from approvals import services as approval_services
from approvals.models import ApprovalRequest
from state.parts import USERS_FILE
from tests.approvals.conftest import make_staff
from tests.staff.conftest import make_support_staff
from tests.state.conftest import export, paused_ticket
from tests.state.test_bundle import empty_the_ledger, restore
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


@pytest.mark.parametrize("personal_data", [False, True])
def test_a_restored_ticket_exports_to_the_same_parts_as_the_bundle_it_came_from(tmp_path, personal_data):
    ticket, _ = paused_ticket("aaron")  # a login that sorts before the staff's, and its pseudonym after them
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(
        approval_id=approval.pk, user=make_staff("approves", can_decide=True), approve=False, note="Sent back broken"
    )
    maria = make_support_staff("Maria", first_name="Maria")
    ticket_services.staff_note(ticket=ticket, user=maria, body="Asked the warehouse.", client_msg_id="n1")
    first = export(tmp_path, ticket, name="first", include_personal_data=personal_data)
    empty_the_ledger()
    restore(first)

    again = export(tmp_path, ticket, name="again", include_personal_data=personal_data)

    for bundle in (first, again):
        usernames = [line.split(b'"username":')[1] for line in (bundle / USERS_FILE).read_bytes().splitlines()]
        assert usernames == sorted(usernames), f"the users part is not in the order of its keys: {usernames}"
    for part in sorted(first.rglob("*.jsonl")):
        assert part.read_bytes() == (again / part.relative_to(first)).read_bytes(), part.name
