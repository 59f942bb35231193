"""Money as people read it: one formatter for every page, message and event."""

from __future__ import annotations

_SYMBOLS = {"usd": "$", "eur": "€", "gbp": "£"}


def format_money(cents: int, currency: str) -> str:
    """``format_money(64900, "usd") == "$649.00"``; currencies without a symbol: ``"649.00 CHF"``."""
    code = (currency or "").lower()
    amount = f"{cents / 100:,.2f}"
    symbol = _SYMBOLS.get(code)
    return f"{symbol}{amount}" if symbol else f"{amount} {code.upper()}".strip()
