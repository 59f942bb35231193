from __future__ import annotations

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
        orders = Order.objects.exclude(payment_reference="")
        for order in orders:
            control.seed_payment(order.payment_reference, order.total_cents, order.currency)
        self.stdout.write(f"Payments in the sandbox for {orders.count()} orders.")
