"""``{% load money %}`` then ``{{ amount_cents|money:currency }}``: "$649.00", the one formatter."""

from __future__ import annotations

from django import template

from tickets.money import format_money

register = template.Library()


@register.filter(name="money")
def money(cents: int | None, currency: str = "usd") -> str:
    if cents is None or cents == "":
        return ""
    return format_money(int(cents), currency)
