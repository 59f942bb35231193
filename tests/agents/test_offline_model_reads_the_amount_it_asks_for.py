"""The offline model reads an amount in the form it asks the customer to write it, in every currency.

When the customer wants part of an order without saying how much, the agent asks, with an example:
"Tell me the amount in KWD, for example "refund KWD 2.000 on K-1001"". It read amounts only with
the symbols and codes of eight currencies ($, €, £, ¥; USD, EUR, GBP, JPY, plus CHF, CAD and AUD
outside plain requests), so on an order in any other currency (CHF, CAD, AUD, SEK, KWD, ISK...)
the customer who wrote the example back word for word was asked the same question again, for
ever: no partial refund could be asked for at all. An amount named by its ISO code in capitals
("KWD 6.170", "20.00 SEK") is read now, in the order's digits as the payment provider counts
them; "SEK 1.500" (a decimal point, or thousands?) is still asked about, as "$1.500" is, and so
is "KWD 6,170" (a decimal comma, or thousands?).
"""

from __future__ import annotations

import re

import pytest

from agents.models import ToolCall
from agents.offline_model import OfflineDeterministicModel
from tests.agents.conftest import rung_again_and_again
from tests.agents.test_money_path import paid, write
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, Order, OrderStatus, Ticket

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def _digits(currency: str) -> str:
    return "".join(f"{ord(letter) - 96:02d}" for letter in currency)  # "usd" -> "211904"


def order_in(currency: str, total: int, sandbox) -> Order:  # noqa: ANN001
    order = Order.objects.create(
        customer=make_customer(), number=f"K-{_digits(currency)}", status=OrderStatus.DELIVERED, total_cents=total,
        currency=currency, payment_reference=f"pi_example_{currency}",
    )  # fmt: skip
    sandbox.seed_payment(order.payment_reference, total, currency)
    return order


def last_words(ticket: Ticket) -> str:
    return Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).order_by("-id").first().body


def refunds_asked(ticket: Ticket) -> list[int]:
    return [c.arguments["amount_cents"] for c in ToolCall.objects.filter(ticket=ticket, name="issue_refund")]


@pytest.mark.parametrize("currency", ["usd", "chf", "cad", "aud", "nzd", "sek", "kwd", "isk"])
def test_the_customer_who_writes_the_agents_example_back_is_refunded_that_amount(sandbox, currency):  # noqa: ANN001
    order = order_in(currency, 500000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=order.customer, subject="Refund", body=f"Please refund part of order {order.number}."
    )
    model = OfflineDeterministicModel()
    rung_again_and_again(ticket.pk, model, rings=3, until_settled=True)
    example = re.search(r'for example "refund ([^"]+) on ', last_words(ticket))[1]

    write(ticket, f"Refund {example} on {order.number}.")
    rung_again_and_again(ticket.pk, model, rings=3, until_settled=True)

    assert refunds_asked(ticket) == [2000], (example, last_words(ticket))
    assert sum(r["amount"] for r in paid(sandbox, order)) <= 2000


@pytest.mark.parametrize(
    ("currency", "words", "cents"),
    [
        ("kwd", "Please refund KWD 6.170 of order {n}.", 6170),
        ("kwd", "Please refund 6.170 KWD of order {n}.", 6170),
        ("sek", "Please refund SEK 20 of order {n}.", 2000),
        ("isk", "Please refund ISK 2,000 of order {n}.", 200000),
        ("chf", "Please refund CHF 20.50 of order {n}.", 2050),
    ],
)
def test_an_amount_named_by_its_code_is_asked_for_as_written(sandbox, currency, words, cents):  # noqa: ANN001
    order = order_in(currency, 500000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=order.customer, subject="Refund", body=words.format(n=order.number)
    )

    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=3, until_settled=True)

    assert refunds_asked(ticket) == [cents], last_words(ticket)


@pytest.mark.parametrize(
    ("currency", "words"),
    [
        ("sek", "Please refund SEK 1.500 of order {n}."),  # a decimal point, or thousands?
        ("usd", "Please refund 20 SEK of order {n}."),  # another currency than the order's
        ("kwd", "Please refund KWD 6.1700 of order {n}."),  # more digits than the dinar has
        ("kwd", "Please refund 6,170 KWD of order {n}."),  # a decimal comma, or thousands?
    ],
)
def test_an_amount_named_by_its_code_that_cannot_be_read_one_way_is_asked_about(sandbox, currency, words):  # noqa: ANN001
    order = order_in(currency, 500000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=order.customer, subject="Refund", body=words.format(n=order.number)
    )

    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=3, until_settled=True)

    assert refunds_asked(ticket) == [], last_words(ticket)
    assert paid(sandbox, order) == []
