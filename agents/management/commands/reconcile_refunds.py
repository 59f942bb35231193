from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agents.refunds import reconcile_open_refunds


def _seconds(text: str) -> int:
    """A whole number of seconds, 0 or more: a negative age would read as "now" (argparse says why)."""
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


_seconds.__name__ = "whole number of seconds (0 or more)"  # how argparse names what it wanted


class Command(BaseCommand):
    help = "Settle every refund left submitted or uncertain from the payment provider's own records."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            type=_seconds,
            default=120,
            help="Only mark a refund failed when the provider has none and it is older than this (seconds).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        counts = reconcile_open_refunds(older_than_seconds=options["older_than"])
        if not counts:
            self.stdout.write("No refunds to reconcile.")
        for status, count in sorted(counts.items()):
            self.stdout.write(f"{count} refund(s) now {status}")
