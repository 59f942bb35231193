"""A member of staff cannot untie their second customer profile by changing their own email address.

The review the approval policy asks for of a refund is a second person's: a member of staff neither
decides nor takes away the review of their own requests, found by ``customers_of_person``, which
counts a customer profile under their email address (the same person shopping under a second
login) as theirs. The customer's page refuses to change that profile's email on them; the user
page did not refuse the other end: a member of staff allowed to change accounts (no superuser)
changed their own email address to another, and the second profile was no longer theirs: its
refunds were theirs to approve. Their own address is a colleague's to change while it ties a
profile to them; a colleague's page changes it as asked.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from approvals.selectors import own_tickets
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tests.tickets.test_order_page_read_before_a_status_change import _page_as_shown_at
from tests.tickets.test_user_page_gives_no_more_than_the_giver_has import _account_manager, _perm
from tickets import services
from tickets.selectors import customers_of_person

pytestmark = pytest.mark.django_db


def _maria_shopping_under_a_second_login():  # noqa: ANN202
    """Maria (support staff, may change accounts), and her ticket as the customer she also is."""
    maria, client = _account_manager()
    maria.email = "maria.lopez@example.test"
    maria.save(update_fields=["email"])
    shopper = make_customer("maria-at-home")
    shopper.email = "Maria.Lopez@example.test"
    shopper.save(update_fields=["email"])
    ticket, _ = services.ticket_open(customer=shopper, subject="Kettle", body="My kettle K-9 leaks.")
    return maria, client, shopper, ticket


def test_an_own_email_change_that_would_untie_a_customer_profile_is_refused():
    maria, client, shopper, ticket = _maria_shopping_under_a_second_login()
    change = reverse("admin:auth_user_change", args=[maria.pk])
    page = _page_as_shown_at(client, change)
    page["email"] = "m.lopez@elsewhere.test"

    answer = client.post(change, page)

    maria = get_user_model().objects.get(pk=maria.pk)
    assert maria.email == "maria.lopez@example.test", (
        f"maria changed her own email to {maria.email} (HTTP {answer.status_code}), and her second customer "
        f"profile became someone else's: her own tickets now {own_tickets(user=maria, ticket_ids=[ticket.pk])}"
    )
    assert customers_of_person(user=maria).filter(pk=shopper.pk).exists()
    assert own_tickets(user=maria, ticket_ids=[ticket.pk]) == {ticket.pk}
    assert answer.status_code == 200
    assert "a colleague" in answer.content.decode() and "Nothing was saved" in answer.content.decode()


def test_an_own_email_change_that_unties_nothing_is_saved():
    maria, client = _account_manager()
    maria.email = "maria.lopez@example.test"
    maria.save(update_fields=["email"])
    change = reverse("admin:auth_user_change", args=[maria.pk])
    page = _page_as_shown_at(client, change)
    page["email"] = "MARIA.LOPEZ@example.test"  # the same address, other case: it ties what it tied

    answer = client.post(change, page)

    assert answer.status_code == 302
    assert get_user_model().objects.get(pk=maria.pk).email == "MARIA.LOPEZ@example.test"


def test_a_colleague_changes_the_email_as_asked():
    maria, _, shopper, _ = _maria_shopping_under_a_second_login()
    _, colleague = _account_manager_named("li")
    change = reverse("admin:auth_user_change", args=[maria.pk])
    page = _page_as_shown_at(colleague, change)
    page["email"] = "m.lopez@elsewhere.test"

    answer = colleague.post(change, page)

    assert answer.status_code == 302
    assert get_user_model().objects.get(pk=maria.pk).email == "m.lopez@elsewhere.test"


def _account_manager_named(username: str) -> tuple[object, Client]:
    person = make_support_staff(username)
    for label in ("auth.view_user", "auth.change_user"):
        person.user_permissions.add(_perm(label))
    client = Client()
    client.force_login(person)
    return person, client
