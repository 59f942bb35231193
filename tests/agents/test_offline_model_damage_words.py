"""Words that describe damage ("it showed up broken", "it actually arrived broken", "it broke after
the first wash") do not stop a plain refund request: the offline model acts on it.
"""

from __future__ import annotations

import pytest

from tests.agents.test_money_path import order_for, paid
from tests.agents.test_offline_model_plain_requests import _answers, _run
from tests.conftest import make_customer

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


@pytest.mark.parametrize(
    "words",
    [
        "My order {n} showed up broken, please refund it.",
        "Please refund order {n}, it actually arrived broken.",
        "Please refund {n}, it broke after the first wash.",
        "Please refund {n}, it stopped working after I used it once.",
    ],
    ids=["showed-up-broken", "actually-arrived-broken", "broke-after-the-first-wash", "after-i-used-it"],
)
def test_a_plain_request_describing_the_damage_is_acted_on(sandbox, words):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "B-3737", 8000, sandbox)
    ticket = _run(customer, words.format(n=order.number))

    refunds = [r["amount"] for r in paid(sandbox, order)]
    assert refunds == [8000], (
        f"the customer plainly asked {words.format(n=order.number)!r} for the whole $80.00 order (nothing "
        f"taken back, no condition); the agent refunded {refunds} cents and answered {_answers(ticket)[-1:]}"
    )
