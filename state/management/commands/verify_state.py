from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from state.verify import verify


class Command(BaseCommand):
    help = (
        "Report on a state bundle (identity, knowledge, permissions, activity, verification), or with --database "
        "on this database against the bundle. Exit status 1 when any check fails."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("bundle", type=Path)
        parser.add_argument(
            "--database", action="store_true", help="check this database against the bundle rather than the bundle"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        report = verify(options["bundle"], database=options["database"])
        self.stdout.write(report.render())
        if not report.ok:
            raise SystemExit(1)
