"""The offline model pays no more than the customer plainly asked: part of an order, an amount to keep
("refund X except/minus $10"), a limit sent in a second message, a question or a condition: it asks.

With the customer's Confirm off (``REFUND_CUSTOMER_CONFIRMATION=0`` or the policy's
``customer_confirms_refunds``, the suite's default) what the model asks for under the threshold is
paid. The README promises the offline model "asks for no more than the customer clearly asked" and
"asks instead of guessing when ... the customer wants part without saying how much". None of
these phrasings is paid as it stands: the model asks (``agents.offline_model.refund_asked``).
"""

from __future__ import annotations

import pytest

from agents.offline_model import OfflineDeterministicModel
from tests.agents.conftest import rung_again_and_again
from tests.agents.test_money_path import order_for, paid, write
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def _refunds_after(sandbox, number: str, words: str, *, then: str = "") -> tuple[str, list[int]]:  # noqa: ANN001
    """The customer writes ``words`` (``{n}``: the order's number), and ``then`` before any answer; the
    agent runs until it settles. Returns (the words as written, what the provider refunded)."""
    customer = make_customer()
    order = order_for(customer, number, 8000, sandbox)
    written = words.format(n=order.number)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=written)
    if then:
        write(ticket, then)
    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)
    return written, [r["amount"] for r in paid(sandbox, order)]


@pytest.mark.parametrize(
    "words",
    [
        # the limit is in the next clause or sentence, which names no "refund"
        "Please refund order {n}, but only the $20 for the missing mug.",
        "Please refund order {n}. Just $20 though, the rest arrived fine.",
        # a part of the order named without an amount
        "Please refund the shipping fee for order {n}.",
        "Please refund the missing item from order {n}.",
        "Please refund one of the two mugs in order {n}.",
        # all of it except an amount
        "Please refund all but $10 of order {n}.",
    ],
)
def test_a_customer_who_asks_for_part_of_an_order_is_not_refunded_the_whole_order(sandbox, words):  # noqa: ANN001
    written, refunds = _refunds_after(sandbox, "R-2701", words)
    assert 8000 not in refunds, (
        f"the customer asked for part of order R-2701 ({written!r}) "
        f"and the whole order was refunded: provider refunds {refunds} cents"
    )


def test_a_limit_sent_in_a_second_message_before_the_answer_is_not_ignored(sandbox):  # noqa: ANN001
    _, refunds = _refunds_after(
        sandbox,
        "R-2702",
        "Please refund order {n}.",
        then="Only $20 of it, for the missing mug; the rest arrived fine.",
    )
    assert 8000 not in refunds, (
        f"the customer limited the refund to $20 before any answer and the whole order was refunded: {refunds} cents"
    )


@pytest.mark.parametrize(
    "words",
    [
        "Please refund order {n} except the $10 shipping.",
        "Please refund order {n} minus the $10 shipping.",
    ],
)
def test_an_amount_to_keep_is_not_refunded_as_the_amount_asked(sandbox, words):  # noqa: ANN001
    written, refunds = _refunds_after(sandbox, "R-2703", words)
    assert refunds in ([], [7000]), (
        f"the customer asked for {written!r} ($70.00 or a question) and was refunded {refunds} cents"
    )


@pytest.mark.parametrize(
    "words",
    [
        # questions, which the model is meant to answer, not pay
        "Can you tell me if order {n} can be refunded?",
        "Will you refund order {n} if I send it back?",
        "Could you let me know when the refund for order {n} will arrive?",
        # a condition that has not happened
        "If it hasn't arrived by Friday, please refund order {n}.",
        "Please refund order {n} only if you cannot send a replacement.",
        "Please refund order {n} unless you can send a replacement.",
    ],
)
def test_a_question_or_a_condition_is_not_paid_as_a_request(sandbox, words):  # noqa: ANN001
    written, refunds = _refunds_after(sandbox, "R-2704", words)
    assert refunds == [], (
        f"the customer wrote {written!r} (a question or a condition, no request yet) and was refunded {refunds} cents"
    )
