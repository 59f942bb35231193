"""The sandbox reads a request's numbers and names as Stripe does, and nothing else.

Python reads more than Stripe: ``\\d`` and ``int()`` take "５０" (full-width) or "١٠" (Arabic-Indic)
as 50 and 10, ``str.isdigit`` takes "²" (which ``int()`` then refuses: a 500), and an amount past
the bigint column failed its insert (a 500). A form field named ``\\x00sandbox_status`` (a NUL is
a valid form name) reached the sandbox's own instruction for a fault and created a refund with
whatever status it named. Each is refused with Stripe's 400, and nothing is stored.
"""

from __future__ import annotations

import pytest

from tests.payments.test_provider import AUTH, PAYMENT, http


@pytest.mark.parametrize(
    "form",
    [
        {"amount": "\uff15\uff10"},  # full-width "50"
        {"amount": "\u0661\u0660"},  # Arabic-Indic "10"
        {"amount": "\u00b2"},  # superscript two
        {"amount": "1" + "0" * 30},
        {"amount": "100", "\x00sandbox_status": "canceled"},
        {"amount": "100", "\x00sandbox_status": "no such status"},
    ],
    ids=["full-width", "arabic-indic", "superscript", "past-bigint", "hidden-status", "hidden-unknown-status"],
)
def test_a_refund_with_a_number_or_a_name_stripe_refuses_is_refused_and_not_stored(payment_sandbox, form):  # noqa: ANN001
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")

    status, _, body = http(payment_sandbox, "POST", "/v1/refunds", {"payment_intent": PAYMENT, **form}, AUTH)

    assert status == 400, (status, body)
    assert body["error"]["type"] == "invalid_request_error"
    assert payment_sandbox.refunds() == []


@pytest.mark.parametrize(
    "amount", ["\uff15\uff10", "\u00b2", "1" + "0" * 30], ids=["full-width", "superscript", "past-bigint"]
)
def test_a_payment_with_an_amount_stripe_refuses_is_refused(payment_sandbox, amount):  # noqa: ANN001
    status, _, body = http(payment_sandbox, "POST", "/v1/payment_intents", {"amount": amount, "currency": "usd"}, AUTH)

    assert status == 400, (status, body)
    assert body["error"]["param"] == "amount"


def test_a_list_limit_in_other_digits_is_refused_not_a_crash(payment_sandbox):  # noqa: ANN001
    status, _, body = http(payment_sandbox, "GET", f"/v1/refunds?payment_intent={PAYMENT}&limit=%C2%B2", headers=AUTH)

    assert status == 400, (status, body)
