"""Money as people read it: one formatter for every page, message, event, email and admin column.

Amounts are kept in the currency's minor unit as the payment provider (Stripe) counts them. Babel
knows how many digits each currency has (two for the dollar, none for the yen, three for the
Kuwaiti dinar) and its symbol, but Stripe does not always count as CLDR does: Stripe's count is
the one kept (``minor_digits``), and Stripe takes some currencies' amounts only in steps (``amount_step``).
"""

from __future__ import annotations

import re
from decimal import Decimal

from babel.numbers import format_currency, get_currency_precision

LOCALE = "en_US"
# CLDR puts a no-break space between a symbol made of letters and the number ("CHF 649.00");
# Babel does not apply that rule, so it is applied here.
_LETTER_THEN_DIGIT = re.compile(r"(?<=[^\W\d_])(?=\d)")

# How Stripe's API counts amounts (docs.stripe.com/currencies): in the currency's unit for its
# zero-decimal currencies, in thousandths for its three-decimal ones, in hundredths for every other,
# whatever digits CLDR gives the currency (none for ISK, ALL, LAK, LBP, MMK, RSD...: an ISK amount of
# 100 is ISK 1 at Stripe).
_ZERO_DECIMAL = frozenset("BIF CLP DJF GNF JPY KMF KRW MGA PYG RWF UGX VND VUV XAF XOF XPF".split())
_THREE_DECIMAL = frozenset("BHD JOD KWD OMR TND".split())
# The step Stripe takes a currency's amounts in (payments and refunds alike), in its minor unit: the
# last digit of a three-decimal currency's amount must be 0, and ISK is taken in whole krónur only
# (multiples of 100). Any other amount is refused.
_PROVIDER_STEPS = {**dict.fromkeys(_THREE_DECIMAL, 10), "ISK": 100}


def minor_digits(currency: str) -> int:
    """How many digits of the currency an amount counts, as the payment provider counts them:
    ``minor_digits("usd") == 2``, ``minor_digits("jpy") == 0``, ``minor_digits("kwd") == 3``,
    ``minor_digits("isk") == 2`` (Stripe's count; CLDR's is 0)."""
    code = (currency or "").upper()
    if code in _ZERO_DECIMAL:
        return 0
    return 3 if code in _THREE_DECIMAL else 2


def amount_step(currency: str) -> int:
    """The payment provider takes amounts of this currency only in multiples of this (minor units):
    1 for most, 10 for the three-decimal currencies, 100 for ISK."""
    return _PROVIDER_STEPS.get((currency or "").upper(), 1)


def format_money(cents: int, currency: str) -> str:
    """``format_money(64900, "usd") == "$649.00"``, ``format_money(4999, "eur") == "€49.99"``,
    ``format_money(500, "jpy") == "¥500"``, ``format_money(64900, "chf") == "CHF\\u00a0649.00"``,
    ``format_money(200000, "isk") == "ISK\\u00a02,000"``."""
    code = (currency or "").upper()
    digits = minor_digits(code)
    amount = Decimal(int(cents)).scaleb(-digits)
    if digits > get_currency_precision(code) and amount != amount.to_integral_value():
        # Never rounded to the digits CLDR shows: ISK 1,500.50 (an amount Stripe counts) is not "ISK 1,500".
        shown = format_currency(amount, code, format=f"¤#,##0.{'0' * digits}", locale=LOCALE, currency_digits=False)
    else:
        shown = format_currency(amount, code, locale=LOCALE)
    return _LETTER_THEN_DIGIT.sub("\u00a0", shown)
