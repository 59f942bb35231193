from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from state.bundle import BundleError
from state.restore import (
    MODEL_PARAMETERS_FLAG,
    ON_CONFLICT,
    ParameterValues,
    RestoreRefused,
    RestoreReport,
    parameter_values,
    state_restore,
)
from state.signature import ALLOW_UNSIGNED_FLAG, KEY_SETTING


class Command(BaseCommand):
    help = (
        "Restore a state bundle into this database, in one transaction, keeping every id and idempotency key. "
        "Refuses a bundle whose signature (STATE_BUNDLE_KEY) does not hold or is missing (unless --allow-unsigned), "
        "a changed bundle, an unknown format and rows already here (unless --on-conflict=skip)."
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
        parser.add_argument(
            ALLOW_UNSIGNED_FLAG,
            action="store_true",
            help=f"restore a bundle without a signature, or whose signature cannot be checked here ({KEY_SETTING} "
            "not set): you accept that anyone who could hand you the file could have written it. The rights it "
            "gave are printed. A signature that does not hold is refused all the same",
        )
        parser.add_argument(
            MODEL_PARAMETERS_FLAG,
            type=Path,
            default=None,
            metavar="FILE",
            help="a JSON file of the values of the model parameters the bundle withheld (a bundle carries a profile "
            "version's generation parameters, never what it sends its endpoint besides, such as headers with a key), "
            'by version: {"3": {"extra_headers": {"X-Key": "..."}}}. Restore names what a version needs',
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = state_restore(
                path=options["bundle"],
                on_conflict=options["on_conflict"],
                allow_unsigned=options["allow_unsigned"],
                model_parameters=_parameter_values(options["model_parameters"]),
            )
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
        if not report.authenticity.proven:
            self._unauthenticated(report)

    def _unauthenticated(self, report: RestoreReport) -> None:
        """Loudly, last: what a bundle nothing vouches for was let do."""
        lines = [
            f"NOT AUTHENTICATED: {report.authenticity.detail}; restored only because {ALLOW_UNSIGNED_FLAG} was "
            "given. Anyone who could hand you this file could have written it.",
        ]
        if report.rights_given:
            lines.append(
                "It created these logins with these rights; check each now and take back any you did not expect:"
            )
            lines += [f"  {username}: {', '.join(rights)}" for username, rights in report.rights_given.items()]
        else:
            lines.append("It created no login with any right (staff status, group, permission or superuser).")
        if report.made_active is not None:
            lines.append(
                "It made its own agent profile version active (none was), and new runs follow its prompt, tools "
                f"and rules: {report.made_active}. Check them in the admin's agent profiles."
            )
        for line in lines:
            self.stdout.write(self.style.WARNING(f"!!! {line}"))


def _parameter_values(path: Path | str | None) -> ParameterValues:
    if path is None:
        return {}
    try:
        given = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise CommandError(f"{MODEL_PARAMETERS_FLAG} {path}: not a JSON file that can be read ({exc})") from None
    try:
        return parameter_values(given)
    except RestoreRefused as exc:
        raise CommandError(_lines("Nothing was restored:", exc.problems)) from None


def _lines(head: str, problems: list[str]) -> str:
    return "\n".join([head, *(f"  - {p}" for p in problems)])
