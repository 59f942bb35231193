from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser
from django.http import Http404

from tickets import selectors, services


def test_customer_reaches_their_own_ticket(customer):
    ticket, _ = services.ticket_open(customer=customer, subject="Mine", body="Hello")
    assert selectors.ticket_get_for_customer(user=customer.user, ticket_id=ticket.pk) == ticket


def test_another_customers_ticket_looks_missing(customer, other_customer):
    ticket, _ = services.ticket_open(customer=customer, subject="Mine", body="Hello")
    with pytest.raises(Http404):
        selectors.ticket_get_for_customer(user=other_customer.user, ticket_id=ticket.pk)


def test_anonymous_user_reaches_no_ticket(customer):
    ticket, _ = services.ticket_open(customer=customer, subject="Mine", body="Hello")
    with pytest.raises(Http404):
        selectors.ticket_get_for_customer(user=AnonymousUser(), ticket_id=ticket.pk)


def test_staff_user_without_customer_profile_reaches_no_ticket_through_the_customer_door(customer, django_user_model):
    staff = django_user_model.objects.create_user(username="agent-smith", password="x" * 12, is_staff=True)
    ticket, _ = services.ticket_open(customer=customer, subject="Mine", body="Hello")
    with pytest.raises(Http404):
        selectors.ticket_get_for_customer(user=staff, ticket_id=ticket.pk)


def test_missing_ticket_is_404(customer):
    with pytest.raises(Http404):
        selectors.ticket_get_for_customer(user=customer.user, ticket_id=999_999)
