from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from payments.sandbox_process import SandboxControl
from tickets.models import Order


class Command(BaseCommand):
    help = "Create, in the local payment sandbox, the payment behind every order that has one. Idempotent."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sandbox", default=None, help="Sandbox base URL (default: STRIPE_API_BASE)")

    def handle(self, *args: Any, **options: Any) -> None:
        base = options["sandbox"] or getattr(settings, "STRIPE_API_BASE", "")
        control = SandboxControl(base)
        if not control.healthy():
            raise CommandError(f"The payment sandbox at {base} does not answer.")
        orders = list(Order.objects.exclude(payment_reference="").order_by("pk"))
        # Each order on its own: one the sandbox refuses (its payment already there with another amount,
        # a reference it does not take) is named at the end, and the orders after it are seeded all the same.
        refused: list[str] = []
        for order in orders:
            try:
                control.seed_payment(order.payment_reference, order.total_cents, order.currency)
            except (RuntimeError, OSError, ValueError) as exc:
                refused.append(f"  - order {order.number} ({order.payment_reference}): {_reason(exc)}")
        self.stdout.write(f"Payments in the sandbox for {len(orders) - len(refused)} orders.")
        if refused:
            raise CommandError(f"The sandbox at {base} did not take {len(refused)} order(s):\n" + "\n".join(refused))


def _reason(exc: Exception) -> str:
    """The sandbox's own words when it answered with an error, else the exception's."""
    text = str(exc)
    start = text.find("{")
    if start != -1:
        try:
            return str(json.loads(text[start:])["error"]["message"])
        except (ValueError, KeyError, TypeError):
            pass
    return text
