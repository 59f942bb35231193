"""Order numbers are unique only as written, while a model's order number is read in any case: a
customer with "a-100" and "A-100" had a refund for "a-100" paid on whichever of the two the database
returned first. Now the number written exactly names its order, and one that names several in
other cases is refused with the choice, so the agent asks which one."""

from __future__ import annotations

import pytest

from agents.tools import ToolError, customer_order, order_of_customer
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services

pytestmark = pytest.mark.django_db


def test_an_order_number_written_exactly_names_its_order_and_one_in_another_case_names_none():
    customer = make_customer()
    lower = make_order(customer, number="ab-100")
    upper = make_order(customer, number="AB-100")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund my order")

    assert customer_order(ticket, "ab-100") == lower
    assert customer_order(ticket, " AB-100 ") == upper
    with pytest.raises(ToolError, match=r"names several of this customer's orders \(ab-100, AB-100\)"):
        customer_order(ticket, "Ab-100")
    assert order_of_customer(customer.pk, "aB-100") is None


def test_an_order_number_in_any_case_names_the_customers_only_order_of_that_number():
    customer = make_customer()
    order = make_order(customer, number="CD-200")
    other = make_order(make_customer(), number="cd-200")  # another customer's: never theirs to name
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Where", body="Where is cd-200?")

    assert customer_order(ticket, "cd-200") == order
    assert order_of_customer(customer.pk, "Cd-200") == order
    assert order_of_customer(other.customer_id, "CD-200") == other
