from __future__ import annotations

import itertools

import pytest
from django.contrib.auth import get_user_model

from tickets.models import Customer, Order, OrderLine, OrderStatus

_counter = itertools.count(1)


def make_customer(name: str = "", *, flagged: bool = False) -> Customer:
    n = next(_counter)
    username = name or f"customer{n}"
    user = get_user_model().objects.create_user(username=username, password="pw-for-tests-123")
    return Customer.objects.create(
        user=user, name=username.title(), email=f"{username}@example.test", requires_refund_approval=flagged
    )


def make_order(
    customer: Customer, *, total_cents: int = 5000, status: str = OrderStatus.DELIVERED, number: str = ""
) -> Order:
    n = next(_counter)
    order = Order.objects.create(
        customer=customer,
        number=number or f"T-{n:05d}",
        status=status,
        total_cents=total_cents,
        currency="usd",
        payment_reference=f"pi_test_{n}",
    )
    OrderLine.objects.create(order=order, sku="SKU", description="Thing", quantity=1, unit_price_cents=total_cents)
    return order


@pytest.fixture
def customer(db) -> Customer:  # noqa: ANN001
    return make_customer()


@pytest.fixture
def other_customer(db) -> Customer:  # noqa: ANN001
    return make_customer()
