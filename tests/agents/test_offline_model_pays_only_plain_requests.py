"""The offline model pays only a request worded plainly: each sentence (and clause) one of a few
plain forms (a greeting, the request itself, why: what went wrong with the order or one of its
items), at most one amount in a currency it knows, no mark it does not know, no request in quotes.
Anything else, whatever its rules made of it, is asked about first ("Just to be sure before I
refund anything ..."), and a plain request then pays.

Pure functions: what ``refund_asked`` reads, and what ``RefundAsk.cents`` would pay of an order.
"""

from __future__ import annotations

import pytest

from agents.offline_model import refund_asked

ORDER = {
    "order_number": "A-1001",
    "currency": "usd",
    "total_cents": 8000,
    "refundable_cents": 8000,
    "lines": [{"description": "Blue mug", "quantity": 1}],
}


def paid(words: str) -> int | None:
    ask = refund_asked(words)
    if ask is None or ask.order_number is None:
        return None
    return ask.cents(ORDER)


@pytest.mark.parametrize(
    ("words", "cents"),
    [
        ("Please refund order A-1001", 8000),
        ("Please refund A-1001", 8000),
        ("PLEASE REFUND ORDER A-1001", 8000),
        ("Can you refund order A-1001?", 8000),
        ("Hi, I'd like a full refund for order #A-1001. Thanks!", 8000),
        ("I want a refund for A-1001, it never arrived", 8000),
        ("I didn't get A-1001, please refund it", 8000),
        ("I would like a refund for order A-1001 as it was not what I ordered", 8000),
        ("Could you refund A-1001 when you get a chance?", 8000),
        ("Refund A-1001 please, it came damaged on the 3rd", 8000),
        ("The blue mug on order A-1001 arrived broken, please refund it", 8000),
        ("Please refund $50.00 on order A-1001", 5000),
        ("Please refund $20 of order A-1001, it was overcharged", 2000),
        ("Please refund order A-1001, it arrived 3 days late", 8000),
        ("My order A-1001 showed up broken, please refund it", 8000),
        ("Please refund 20 USD on order A-1001", 2000),
        ("pls refund A-1001 thx", 8000),
        ("Kindly refund order A-1001", 8000),
        ("Requesting a refund for order A-1001", 8000),
        ("I am requesting a full refund for order A-1001, it arrived broken", 8000),
        # a friendly mark, emphasis, a deadline
        ("Please refund order A-1001 🙏", 8000),
        ("Please refund order A-1001 😊 thanks", 8000),
        ("Please refund order A-1001 👍🏽", 8000),
        ("Please refund **A-1001**", 8000),
        ("Please refund *order A-1001*", 8000),
        ("Please refund **$20** on order A-1001", 2000),
        ("Please refund order A-1001 by Friday", 8000),
        ("Please refund order A-1001 by the end of the week, thanks", 8000),
        # why, in any words, beside a plainly worded request
        ("Please refund order A-1001, the handle snapped off on the first day", 8000),
        ('Please refund order A-1001, the "deluxe" mug arrived smashed', 8000),
        ("Please refund order A-1001, the blue mug arrived smashed", 8000),
        ("My blue mug A-1001 broke after a week. Please refund order A-1001.", 8000),
    ],
)
def test_a_plain_request_is_paid(words, cents):  # noqa: ANN001
    assert paid(words) == cents, f"{words!r}: paid {paid(words)} cents, not {cents}"


@pytest.mark.parametrize(
    "words",
    [
        # taken back, held or conditioned in a later line
        "Please refund A-1001\nnvm",
        "Please refund A-1001\nwait, don't",
        "Please refund A-1001\nonly if it doesn't turn up by Friday",
        "Please refund A-1001\nnot sure yet",
        "Please refund A-1001 no wait",
        "Please refund A-1001 lol jk",
        "Please refund A-1001 ... or not",
        "pls refund A-1001 later",
        "Requesting a refund for order A-1001 if it is lost",
        # the amount changed or worked out
        "Please refund A-1001\nmake that $30",
        "Please refund A-1001. Actually $30",
        "Please refund A-1001 after deducting the $20 coupon",
        "Please refund $20 on A-1001 and $10 on shipping",
        "Please refund A-1001 $20 less than the total",
        # currencies it does not know, numbers it cannot place
        "Please refund C$20 on A-1001",
        "Please refund HK$20 on A-1001",
        "Please refund MX$20 on A-1001",
        "Please refund R$20 on A-1001",
        "Please refund NT$20 on A-1001",
        "Please refund A-1001 20 HKD",
        "Please refund 20 pesos on A-1001",
        "Please refund 20 francs on order A-1001",
        "Please refund Rs 500 on order A-1001",
        "Please refund twenty dollars on A-1001",
        "Please refund 20-25 USD on A-1001",
        "Please refund 50% of A-1001",
        "Ref: INV-2024-0001, please refund A-1001",
        # about a refund, not asking for one
        "Please check the refund on A-1001",
        "Please explain the refund on A-1001",
        "Can you confirm the refund on A-1001",
        "Please reverse the refund on A-1001",
        "Please undo the refund on A-1001",
        "I didnt want a refund for A-1001",
        "Please do not refund A-1001",
        # hedged, conditional, either/or, someone else's words
        "I probably want a refund for A-1001",
        "I guess please refund A-1001",
        "I think you should refund A-1001",
        "You may refund A-1001",
        "Please refund A-1001 after I return it",
        "Please refund A-1001 upon return",
        "Please refund A-1001, unless you can replace it",
        "I'd like a refund for order A-1001 if it is not too late",
        "Please refund either A-1001 or give me store credit",
        'My sister wrote "please refund A-1001"',
        "> please refund A-1001",
        "My sister says please refund A-1001",
        "Please refund A-1001 tomorrow",
        "Please refund A-1001 in store credit",
        "Please refund A-1001 to my other card",
        "Refund my order, not A-1001",
        # a later clause that changes, hedges or reports it
        "Please refund order A-1001. Half is fine.",
        "Please refund order A-1001. Oh wait, it just arrived",
        "Please refund order A-1001. My wife will return it next week",
        "Please refund order A-1001. Store credit works too",
        "Please refund order A-1001, it arrived 3 times",
        '"Please refund order A-1001"',
        "Please refund order A-1001\nI take that back",
        "Please refund order A-1001\nall good, it's arrived",
        "Please refund order A-1001\nWrong ID",
        "Please refund order A-1001 and my last order",
        "Please refund $20 on order A-1001\nand the postage",
        "Please refund order A-1001, a quarter of it",
        "Please refund ½ of order A-1001",
        "Please refund order A-1001 🤔",
        "Please refund order A-1001 😬",
        "Please refund A-1001 by Friday if it has not arrived",
        "Please refund A-1001 by Friday, or not",
        "Please refund A-1001 by then",
        "Please refund **A-1001** later",
        "Hypothetically, could you refund order A-1001?",
        "Per my manager, please refund order A-1001",
        "Please refund order A-1001 as a gift card",
        "Please refund order A-1001, I was overcharged",
        # known words that take it back, narrow it, defer it or ask nothing
        "Please refund order A-1001.\nI received it today.",
        "Please refund order A-1001.\nI have it now.",
        "Please refund order A-1001, but it works now",
        "Please refund order A-1001.\nThe lost parcel arrived today.",
        "Please refund order A-1001.\nI got the money back.",
        "I would like to thank you for the full refund on order A-1001",
        "Please, the refund for order A-1001 was wrong",
        "What would you refund for order A-1001?",
        "We will refund order A-1001",
        "Please refund order A-1001, the delivery",
        "Please refund all of order A-1001 but the delivery",
        "Please refund order A-1001 with $20 off",
        "Please refund $20 on order A-1001, the rest too",
        "Please refund $1.500 on order A-1001",
        "Please refund order A-1001 on the 30th",
        "Please refund order A-1001 another time",
        "Please refund order A-1001, to another order",
        "Please refund order A-1001. I want another mug.",
    ],
)
def test_anything_else_is_asked_about_first(words):  # noqa: ANN001
    assert not paid(words), f"{words!r} was paid {paid(words)} cents without asking"
