from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from tickets.demo import DEMO_PASSWORD, STAFF_USERNAME, seed_demo


class Command(BaseCommand):
    help = "Create demo customers, orders, a staff user and help articles. Safe to run again."

    def handle(self, *args: Any, **options: Any) -> None:
        created = seed_demo()
        summary = ", ".join(f"{count} {name}" for name, count in created.items())
        self.stdout.write(f"Demo data ready (created now: {summary}).")
        self.stdout.write(
            f"Logins: staff '{STAFF_USERNAME}', customers 'alice', 'bob', 'carol'; password '{DEMO_PASSWORD}'."
        )
