"""Money spelled one way: the formatter, and the template filter that calls it."""

from __future__ import annotations

import pytest
from django.template import Context, Template

from tickets.money import format_money


@pytest.mark.parametrize(
    ("cents", "currency", "text"),
    [
        (4999, "usd", "$49.99"),
        (64900, "USD", "$649.00"),
        (123456789, "usd", "$1,234,567.89"),
        (1, "usd", "$0.01"),
        (0, "usd", "$0.00"),
        (4999, "eur", "€49.99"),
        (4999, "gbp", "£49.99"),
        (4999, "cad", "CA$49.99"),
        # The yen has no minor unit: 500 of the provider's units are ¥500, not ¥5.00.
        (500, "jpy", "¥500"),
        # A symbol made of letters stands apart from the number, by a no-break space.
        (64900, "chf", "CHF\u00a0649.00"),
    ],
)
def test_an_amount_in_minor_units_is_spelled_with_its_currency_symbol(cents, currency, text):
    assert format_money(cents, currency) == text


def test_no_amount_is_spelled_with_the_code_after_the_number():
    for currency in ("usd", "eur", "gbp", "chf", "sek", "jpy"):
        spelled = format_money(4999, currency)
        assert not spelled.endswith(currency.upper()), spelled


def test_the_template_filter_spells_money_as_the_formatter_does():
    template = Template("{% load money %}[{{ cents|money:currency }}][{{ nothing|money:currency }}]")
    assert template.render(Context({"cents": 4999, "currency": "usd", "nothing": None})) == "[$49.99][]"
