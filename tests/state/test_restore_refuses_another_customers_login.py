"""Restore never links a moved customer to a login of the same name that is someone else here.

README (state bundle): a customer's login in the bundle is matched to the login of that name here only
when it is the login of the same customer (the bundle's customer row, already here: the same id, name,
email, made at that moment). A login here with no customer, or another customer's, is another person:
linked, whoever holds its password would read the moved tickets and write and confirm in them.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management.base import CommandError
from django.test import Client

from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.state.conftest import export, paused_ticket
from tests.state.test_bundle import empty_the_ledger, ledger_counts, restore
from tickets.models import Customer, Ticket

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def _refused_and_nothing_written(path, stranger) -> str:  # noqa: ANN001
    counts = ledger_counts()
    with pytest.raises(CommandError) as refused:
        restore(path)
    message = str(refused.value)
    assert "Nothing was restored" in message and "'bob'" in message, message
    assert ledger_counts() == counts
    assert not Customer.objects.filter(user=stranger).exists()
    return message


def test_restore_refuses_a_customer_login_that_is_a_plain_login_here(tmp_path):
    ticket, _ = paused_ticket("bob")
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()

    # On the new deployment, "bob" is someone's login with no customer and no staff rights.
    stranger = get_user_model().objects.create_user(username="bob", password="stranger-pass-123")

    message = _refused_and_nothing_written(path, stranger)

    assert "not the login of that customer here" in message, message
    browser = Client()
    browser.force_login(stranger)
    assert browser.get(f"/tickets/{ticket.pk}/").status_code != 200
    assert not Ticket.objects.filter(pk=ticket.pk).exists()


def test_restore_refuses_a_customer_login_that_is_another_customers_here(tmp_path):
    ticket, _ = paused_ticket("bob")
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()

    # On the new deployment, "bob" is the login of another customer (another id, name and email).
    stranger = get_user_model().objects.create_user(username="bob", password="stranger-pass-123")
    Customer.objects.create(pk=ticket.customer_id + 50, user=stranger, name="Robert Other", email="rob@other.test")

    counts = ledger_counts()
    with pytest.raises(CommandError, match="'bob'") as refused:
        restore(path)
    assert ledger_counts() == counts
    assert Customer.objects.get(user=stranger).email == "rob@other.test"
    message = str(refused.value)
    assert "Nothing was restored" in message and "not the login of that customer here" in message, message


def test_restore_matches_the_login_of_the_same_customer_already_here(tmp_path):
    """Restoring again (a ticket moved once, its sibling later): the customer row is the same, so
    is its login."""
    ticket, _ = paused_ticket("bob")
    first = export(tmp_path, ticket, include_personal_data=True, name="first")
    empty_the_ledger()
    restore(first)
    bob = get_user_model().objects.get(username="bob")

    out = restore(first, on_conflict="skip")

    assert "matched by username (bob)" in out, out
    assert Customer.objects.get(pk=ticket.customer_id).user_id == bob.pk


def test_restore_refuses_a_login_that_is_no_customers_in_the_bundle_and_a_customers_here(tmp_path):
    """A former member of staff (no rights left) who decided the approval is not the customer of the
    same name here: matched, the customer would read as the one who decided it."""
    ticket, _ = paused_ticket()
    former = get_user_model().objects.create_user(username="bob", password="staff-pass-123")
    former.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    former = get_user_model().objects.get(pk=former.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(approval_id=approval.pk, user=former, approve=False, note="Not this one")
    former.user_permissions.clear()  # left the team since
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    stranger = get_user_model().objects.create_user(username="bob", password="stranger-pass-123")
    Customer.objects.create(pk=ticket.customer_id + 50, user=stranger, name="Robert Other", email="rob@other.test")
    counts = ledger_counts()

    with pytest.raises(CommandError) as refused:
        restore(path)

    message = str(refused.value)
    assert "Nothing was restored" in message and "'bob' is no customer's login in the bundle" in message, message
    assert ledger_counts() == counts


def test_restore_refuses_a_customer_login_that_is_staff_on_both_sides_but_no_customers_here(tmp_path):
    """A member of staff who is also a customer (a colleague who ordered from the shop) is staff in the
    bundle: a member of staff of the same name here, with no customer, is not shown to be them, and
    linked, they would read and write the moved tickets as their customer."""
    ticket, _ = paused_ticket("bob")
    get_user_model().objects.filter(username="bob").update(is_staff=True)
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    stranger = get_user_model().objects.create_user(username="bob", password="stranger-pass-123", is_staff=True)

    message = _refused_and_nothing_written(path, stranger)

    assert "not the login of that customer here" in message, message
