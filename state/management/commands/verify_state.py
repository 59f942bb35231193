from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from state.signature import ALLOW_UNSIGNED_FLAG, KEY_SETTING
from state.verify import verify


class Command(BaseCommand):
    help = (
        "Report on a state bundle (identity, knowledge, permissions, activity, verification: its signature "
        "under STATE_BUNDLE_KEY first), or with --database on this database against the bundle. Exit status 1 "
        "when any check fails."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("bundle", type=Path)
        parser.add_argument(
            "--database", action="store_true", help="check this database against the bundle rather than the bundle"
        )
        parser.add_argument(
            ALLOW_UNSIGNED_FLAG,
            action="store_true",
            help=f"read a bundle without a signature, or whose signature cannot be checked here ({KEY_SETTING} not "
            "set); the report opens with the rights it would give. A signature that does not hold fails all the same",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        report = verify(options["bundle"], database=options["database"], allow_unsigned=options["allow_unsigned"])
        self.stdout.write(report.render())
        if not report.ok:
            raise SystemExit(1)
