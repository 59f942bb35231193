"""Export: the chosen tickets' rows, pseudonymised unless asked otherwise, secrets withheld, as a bundle."""

from __future__ import annotations

import subprocess
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from agents.models import AgentProfile
from agents.profiles import CONTENT_FIELDS
from agents.refunds import tickets_with_money_in_flight
from agents.tools import REGISTRY
from state import bundle, signature
from state.parts import PARTS, USERS_FILE, USERS_LABEL, Selection
from state.pseudonyms import (
    SECRET_SETTINGS,
    bound_digests,
    pseudonymise,
    rebind_digests,
    withhold_model_parameters,
    withhold_profile_secrets,
    withhold_secrets,
)
from state.rows import Row, columns, dump, is_user_column, key_of, user_rows
from support import reads
from tickets.models import Ticket, TicketStatus

# Tickets a person or the agent may still work on.
FINISHED_TICKET_STATUSES = (TicketStatus.RESOLVED, TicketStatus.CLOSED)
# Settings that say how the agent behaved, carried by value (none of them is a secret).
SETTINGS_IN_FORCE = ("AGENT_MODEL", "REFUND_CUSTOMER_CONFIRMATION", "APPROVAL_CONFIRM_ABOVE_CENTS", "AGENT_MAX_STEPS")


class NoSuchTickets(ValueError):
    pass


def select_tickets(*, ticket_ids: list[int], every: bool, open_only: bool) -> Selection:
    tickets = Ticket.objects.all() if every else Ticket.objects.filter(pk__in=ticket_ids)
    if not every:
        missing = sorted(set(ticket_ids) - set(tickets.values_list("pk", flat=True)))
        if missing:
            raise NoSuchTickets(f"no ticket {', '.join(f'#{pk}' for pk in missing)} in this database")
    if open_only:
        # Finished tickets stay behind, unless money of theirs is still moving (a refund pending at the
        # provider, uncertain, or failed unseen and still asked about): the reconciler settles it where
        # the ticket lands, and tells staff.
        moving = list(tickets_with_money_in_flight())
        tickets = tickets.exclude(status__in=FINISHED_TICKET_STATUSES) | tickets.filter(
            pk__in=[row["ticket_id"] for row in moving]
        )
    return Selection(ticket_ids=tuple(sorted(tickets.values_list("pk", flat=True))))


@dataclass
class Collected:
    rows: dict[str, list[Row]]
    users: list[Row]
    withheld_secrets: Counter[str] = field(default_factory=Counter)


def collect(selection: Selection, *, personal_data: bool, quoted_from: dict[str, set[Any]] | None = None) -> Collected:
    """Every part's rows for the selection, as they will be written (or compared, by verify: then
    ``quoted_from`` names the bundle's rows, whose words alone are hunted, see ``pseudonymise``)."""
    # One moment for every part: a ticket that moves on while it is exported is in the bundle as it was.
    with reads.one_snapshot(long=True):
        return _collect(selection, personal_data=personal_data, quoted_from=quoted_from)


def _collect(selection: Selection, *, personal_data: bool, quoted_from: dict[str, set[Any]] | None) -> Collected:
    rows = {part.label: dump(part.select(selection)) for part in PARTS}
    usernames: set[str] = set()
    for part in PARTS:
        keys = [key_of(f) for f in columns(part.model) if is_user_column(f)]
        usernames.update(row[k] for row in rows[part.label] for k in keys if row[k] is not None)
    users = user_rows(usernames)
    bound = bound_digests(rows)
    if not personal_data:
        pseudonymise(rows, users, personal_labels=[p.label for p in PARTS if p.personal], quoted_from=quoted_from)
    withhold_profile_secrets(rows)
    secrets = withhold_secrets(rows, users)
    rebind_digests(rows, bound)
    # In the order of their key, as written (a login pseudonymised takes another name), by code point, not
    # by the database's collation: the same users are the same bytes wherever they are exported.
    users.sort(key=lambda user: user["username"])
    return Collected(rows=rows, users=users, withheld_secrets=secrets)


def migration_state() -> dict[str, list[str]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT app, name FROM django_migrations ORDER BY app, name")
        state: dict[str, list[str]] = {}
        for app, name in cursor.fetchall():
            state.setdefault(app, []).append(name)
    return state


def app_version() -> dict[str, Any]:
    project = tomllib.loads((Path(settings.BASE_DIR) / "pyproject.toml").read_text())["project"]
    try:
        revision = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=settings.BASE_DIR, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        revision = None  # an image without git: the version and the migrations still say what wrote it
    return {"name": project["name"], "version": project["version"], "revision": revision}


def tools_in_force() -> dict[str, dict[str, Any]]:
    """Each registered tool's replay policy, and whether the policy in code may ask an approval for it."""
    return {
        name: {"replay_policy": str(tool.replay_policy), "policy_may_ask_approval": tool.needs_approval is not None}
        for name, tool in sorted(REGISTRY.items())
    }


def active_profile_content() -> dict[str, Any] | None:
    """The active agent profile version's number and content (its rules), or None when none is."""
    active = AgentProfile.objects.filter(is_active=True).first()
    if active is None:
        return None
    content = {name: getattr(active, name) for name in CONTENT_FIELDS}
    return {
        "version": active.version,
        **content,
        "model_parameters": withhold_model_parameters(active.model_parameters),
    }


@dataclass
class Exported:
    manifest: dict[str, Any]
    key_id: str | None  # of the key it was signed with; None: written unsigned


def state_export(
    *, selection: Selection, personal_data: bool, output: Path, every: bool, open_only: bool, allow_unsigned: bool
) -> Exported:
    """Write the bundle of ``selection`` at ``output``, signed with this deployment's ``STATE_BUNDLE_KEY``.
    Without the key, raises ``bundle.SignatureError`` before reading anything, unless ``allow_unsigned``:
    then the bundle is written unsigned."""
    key = signature.configured_key()
    if key is None and not allow_unsigned:
        raise bundle.SignatureError(
            [
                f"{signature.KEY_SETTING} is not set: the bundle cannot be signed, and a deployment restoring it "
                "could not tell it from a forgery; set the same key here and where it will be restored, or pass "
                f"{signature.ALLOW_UNSIGNED_FLAG} to write it unsigned"
            ]
        )
    collected = collect(selection, personal_data=personal_data)
    files: dict[str, bytes] = {part.file: bundle.encode_rows(collected.rows[part.label]) for part in PARTS}
    files[USERS_FILE] = bundle.encode_rows(collected.users)
    entries = [{"label": USERS_LABEL, "file": USERS_FILE}] + [{"label": p.label, "file": p.file} for p in PARTS]
    for entry in entries:
        data = files[entry["file"]]
        entry.update(rows=data.count(b"\n"), sha256=bundle.sha256(data))
    manifest = {
        "format": bundle.FORMAT,
        "format_version": bundle.FORMAT_VERSION,
        "app": app_version(),
        "migrations": migration_state(),
        "created_at": timezone.now().isoformat(),
        "selection": {
            "tickets": list(selection.ticket_ids),
            "all": every,
            "open_only": open_only,
            # Not chosen, but holding refunds (asked for, paid or declined) on the chosen tickets' orders.
            "carried_for_refunds": list(selection.carried_for_refunds),
        },
        "personal_data": personal_data,
        "counts": {e["label"]: e["rows"] for e in entries},
        "parts": entries,
        "tools": tools_in_force(),
        "settings": {name: getattr(settings, name, None) for name in SETTINGS_IN_FORCE},
        "secrets": {
            "not_included": list(SECRET_SETTINGS),
            "withheld_from_rows": dict(sorted(collected.withheld_secrets.items())),
        },
        # The agent profile versions the runs are pinned to (their rows are a part of the bundle).
        "profiles": sorted({row["version"] for row in collected.rows.get("agents.AgentProfile", [])}),
        # The version new runs started with here: made active by a restore into a deployment with none.
        "active_profile": active_profile_content(),
    }
    bundle.write(output, manifest, files, key=key)
    return Exported(manifest=manifest, key_id=signature.key_id(key) if key is not None else None)
