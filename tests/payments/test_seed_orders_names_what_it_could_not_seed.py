"""``manage.py sandbox_seed_orders`` seeds every order it can, names each one the sandbox refused, and
exits non-zero: an order whose payment the sandbox already holds with another amount (its total
corrected since), or a payment reference the sandbox does not take, stopped the command at that
order with a traceback, and the orders after it were never seeded."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from tests.conftest import make_customer, make_order

pytestmark = pytest.mark.django_db


def test_an_order_the_sandbox_refuses_is_named_and_the_others_are_seeded(payment_sandbox):
    customer = make_customer()
    changed = make_order(customer, total_cents=5000)
    payment_sandbox.seed_payment(changed.payment_reference, 4000, "usd")  # seeded before its total was corrected
    after = make_order(customer, total_cents=2500)

    with pytest.raises(CommandError) as refused:
        call_command("sandbox_seed_orders", "--sandbox", payment_sandbox.base_url)

    assert changed.number in str(refused.value)
    assert after.number not in str(refused.value)
    # Seeded: the sandbox holds its payment, with its amount, and refuses another.
    assert payment_sandbox.seed_payment(after.payment_reference, 2500, "usd")["amount"] == 2500
    with pytest.raises(RuntimeError, match="already exists"):
        payment_sandbox.seed_payment(after.payment_reference, 1, "usd")
