from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from state.bundle import BundleError
from state.restore import ON_CONFLICT, RestoreRefused, state_restore


class Command(BaseCommand):
    help = (
        "Restore a state bundle into this database, in one transaction, keeping every id and idempotency key. "
        "Refuses a changed bundle, an unknown format and rows already here (unless --on-conflict=skip)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("bundle", type=Path)
        parser.add_argument(
            "--on-conflict",
            choices=ON_CONFLICT,
            default="fail",
            help="fail (default): restore nothing if a bundled row is already here; skip: leave a ticket that is "
            "already here (and every row of it) as it is, and keep this deployment's policy and help articles",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = state_restore(path=options["bundle"], on_conflict=options["on_conflict"])
        except BundleError as exc:
            raise CommandError(_lines(f"The bundle {options['bundle']} cannot be trusted:", exc.problems)) from None
        except RestoreRefused as exc:
            raise CommandError(_lines("Nothing was restored:", exc.problems)) from None
        for warning in report.warnings:
            self.stdout.write(f"Note: {warning}")
        inserted = ", ".join(f"{label} {n}" for label, n in report.inserted.items() if n)
        self.stdout.write(f"Restored {options['bundle']}: {inserted or 'nothing new'}.")
        if report.already_here:
            self.stdout.write(
                "Already here, the same: " + ", ".join(f"{k} {n}" for k, n in report.already_here.items())
            )
        if report.skipped_tickets:
            self.stdout.write("Skipped, already here: " + ", ".join(f"#{pk}" for pk in report.skipped_tickets))
        created, matched = ", ".join(report.users_created) or "-", ", ".join(report.users_matched) or "-"
        self.stdout.write(
            f"Users: {len(report.users_created)} created without a password ({created}), "
            f"{len(report.users_matched)} matched by username ({matched})."
        )


def _lines(head: str, problems: list[str]) -> str:
    return "\n".join([head, *(f"  - {p}" for p in problems)])
