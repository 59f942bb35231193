from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from state.bundle import BundleError
from state.export import NoSuchTickets, select_tickets, state_export
from state.signature import ALLOW_UNSIGNED_FLAG, KEY_SETTING


class Command(BaseCommand):
    help = (
        "Write a state bundle of tickets: their ledger, the users and orders they name, the approval policy "
        "and rules in force, signed with STATE_BUNDLE_KEY. Customers' personal data is pseudonymised unless "
        "--include-personal-data."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--ticket", type=int, action="append", dest="tickets", metavar="ID", help="repeatable")
        which.add_argument("--all", action="store_true", help="every ticket")
        parser.add_argument("--open-only", action="store_true", help="leave out resolved and closed tickets")
        parser.add_argument(
            "--include-personal-data",
            action="store_true",
            help="carry customers' names, emails, logins and words as they are (to move a deployment)",
        )
        parser.add_argument(
            "--output", required=True, type=Path, help="a new directory, or a file ending in .tar (one file to move)"
        )
        parser.add_argument(
            ALLOW_UNSIGNED_FLAG,
            action="store_true",
            help=f"write the bundle unsigned when {KEY_SETTING} is not set (no deployment can then tell it from a "
            "forgery; restoring it asks for this flag too). With the key set, the bundle is signed all the same",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            selection = select_tickets(
                ticket_ids=options["tickets"] or [], every=options["all"], open_only=options["open_only"]
            )
        except NoSuchTickets as exc:
            raise CommandError(str(exc)) from None
        if not selection.ticket_ids:
            if options["open_only"]:
                raise CommandError("no ticket to export: with --open-only, every chosen ticket is resolved or closed")
            raise CommandError("no ticket to export: this database has no tickets")
        try:
            exported = state_export(
                selection=selection,
                personal_data=options["include_personal_data"],
                output=Path(options["output"]),
                every=options["all"],
                open_only=options["open_only"],
                allow_unsigned=options["allow_unsigned"],
            )
        except BundleError as exc:
            raise CommandError(str(exc)) from None
        manifest = exported.manifest
        counts = ", ".join(f"{label} {n}" for label, n in manifest["counts"].items() if n)
        self.stdout.write(f"Wrote {options['output']}: {len(selection.ticket_ids)} ticket(s); {counts}.")
        if exported.key_id is not None:
            self.stdout.write(
                f"Signed with {KEY_SETTING} (key id {exported.key_id}): restore it where the same key is set."
            )
        else:
            self.stdout.write(
                self.style.WARNING(
                    f"WARNING: NOT SIGNED ({KEY_SETTING} is not set): nothing proves this bundle was written here. "
                    f"Restoring it needs {ALLOW_UNSIGNED_FLAG}, and a forged one would be restored the same way."
                )
            )
        if selection.carried_for_refunds:
            self.stdout.write(
                "Also carried, for the refunds asked for, paid or declined on the same orders: "
                + ", ".join(f"#{pk}" for pk in selection.carried_for_refunds)
                + "."
            )
        if not options["include_personal_data"]:
            self.stdout.write("Customers' personal data is pseudonymised (--include-personal-data to carry it).")
        withheld = manifest["secrets"]["withheld_from_rows"]
        if withheld:
            self.stdout.write(f"Secret values found in rows were withheld: {', '.join(withheld)}.")
