"""Restore never makes a member of the support team the customer of moved tickets.

README (state bundle): restore refuses a login named in the bundle that is staff in one deployment
and a customer in the other: the same name, not the same person. A support-team member needs no
"staff status" (that is only for the admin): their group makes them staff. Linked as the bundled
customer, they would read the customer's chat and could write in it and press Confirm on a refund.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import CommandError
from django.test import Client

from staff.permissions import GROUP
from tests.state.conftest import export, paused_ticket
from tests.state.test_bundle import empty_the_ledger, restore
from tickets.models import Ticket

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def test_restore_does_not_make_a_support_staff_member_the_customer_of_moved_tickets(tmp_path):
    ticket, _ = paused_ticket("alice")
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()

    # On the new deployment, "alice" is a member of the support team (inbox and approvals, no admin).
    alice_staff = get_user_model().objects.create_user(username="alice", password="staff-pass-123")
    alice_staff.groups.add(Group.objects.get(name=GROUP))
    assert alice_staff.has_perm("tickets.handle_ticket") and not alice_staff.is_staff

    refused = False
    try:
        restore(path)
    except CommandError:
        refused = True

    restored = Ticket.objects.filter(pk=ticket.pk).select_related("customer").first()
    linked = restored is not None and restored.customer.user_id == alice_staff.pk
    browser = Client()
    browser.force_login(alice_staff)
    chat_status = browser.get(f"/tickets/{ticket.pk}/").status_code

    assert refused or not linked, (
        "restore linked the bundled customer 'alice' to the support-staff account 'alice' of this deployment "
        f"(not the same person): that staff member now opens the customer's chat as its customer (HTTP {chat_status}) "
        "and can write and confirm refunds in the customer's name; restore must refuse a customer login that is "
        "support staff here"
    )
