"""What the tests of customers' requests share: a ticket of the customer's, and the customer signed in."""

from __future__ import annotations

import pytest
from django.test import Client

from tickets import services
from tickets.models import Customer, Ticket


@pytest.fixture
def ticket(customer: Customer) -> Ticket:
    ticket, _ = services.ticket_open(customer=customer, subject="Broken kettle", body="It arrived cracked.")
    return ticket


@pytest.fixture
def signed_in(customer: Customer) -> Client:
    """The customer's browser: a refused request is answered, not raised into the test."""
    client = Client(raise_request_exception=False)
    client.force_login(customer.user)
    return client
