from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from tickets.demo import DEMO_PASSWORD, STAFF_USERNAME, seed_demo


class Command(BaseCommand):
    help = "Create demo customers, orders, a staff user and help articles. Safe to run again."

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.DEMO_DATA:
            self.stdout.write(
                "Demo data not seeded: this is not demo mode (DEBUG is off). "
                "Set DEMO_DATA=1 to seed it anyway; it creates a superuser with a published password."
            )
            return
        created = seed_demo()
        summary = ", ".join(f"{count} {name}" for name, count in created.items())
        self.stdout.write(f"Demo data ready (created now: {summary}).")
        self.stdout.write(
            f"Logins: staff '{STAFF_USERNAME}', customers 'alice', 'bob', 'carol'; password '{DEMO_PASSWORD}'."
        )
