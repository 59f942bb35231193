"""The offline model does not pay a refund held, taken back or put on a condition: it asks first.

README ("Refunds: the rules", the offline model): it "asks for no more than the customer clearly
asked": "hold off on the refund" is not a request, a request with a condition ("if it has not arrived
by Friday", "unless ...") is asked about, and a request taken back ("never mind", "changed my mind")
is asked about; nothing is refunded then. With the customer's Confirm off (the default here), the
model's reading is the only gate between these words and the money.
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
        # "hold off on the refund" is documented as not a request; "hold the refund" is the same.
        "Please hold the refund for order {n}.",
        # Taken back in the same message.
        "Please refund order {n}, on second thought, don't.",
        "Please refund order {n} - actually it just showed up, sorry!",
        # A condition, put otherwise than "if"/"unless".
        "I'd like a refund for {n} in the event that it doesn't show up by Monday.",
        "Please refund order {n} should it not arrive by Friday.",
        "Please refund order {n} after you receive my return.",
    ],
    ids=["hold-the-refund", "on-second-thought", "actually-it-showed-up", "in-the-event", "should-it", "after-return"],
)
def test_words_that_do_not_plainly_ask_for_a_refund_now_are_not_paid(sandbox, words):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "B-3535", 8000, sandbox)
    ticket = _run(customer, words.format(n=order.number))

    refunds = [r["amount"] for r in paid(sandbox, order)]
    assert refunds == [], (
        f"the customer wrote {words.format(n=order.number)!r} - not a plain request to refund now (held, "
        f"taken back, or on a condition) - and the agent refunded {refunds} cents with no question "
        f"(answer: {_answers(ticket)[-1:]})"
    )
