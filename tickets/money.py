"""Money as people read it: one formatter for every page, message, event, email and admin column.

Amounts are kept in the currency's minor unit (what the payment provider counts); Babel knows
how many digits each currency has (two for the dollar, none for the yen) and its symbol.
"""

from __future__ import annotations

import re
from decimal import Decimal

from babel.numbers import format_currency, get_currency_precision

LOCALE = "en_US"
# CLDR puts a no-break space between a symbol made of letters and the number ("CHF 649.00");
# Babel does not apply that rule, so it is applied here.
_LETTER_THEN_DIGIT = re.compile(r"(?<=[^\W\d_])(?=\d)")


def format_money(cents: int, currency: str) -> str:
    """``format_money(64900, "usd") == "$649.00"``, ``format_money(4999, "eur") == "€49.99"``,
    ``format_money(500, "jpy") == "¥500"``, ``format_money(64900, "chf") == "CHF\\u00a0649.00"``."""
    code = (currency or "").upper()
    amount = Decimal(int(cents)).scaleb(-get_currency_precision(code))
    return _LETTER_THEN_DIGIT.sub("\u00a0", format_currency(amount, code, locale=LOCALE))
