"""Restore: a bundle's rows into this database, whole or not at all.

Preconditions checked before anything is written: the bundle's signature holds under this
deployment's ``STATE_BUNDLE_KEY`` (or the operator accepts a bundle without one, and is then
told the rights it gave), every byte of the bundle matches its digests, the format is one this
release reads, this database has applied every migration
the bundle was written at (and none is pending), and no bundled row is already here under
its primary key or a unique key (unless ``on_conflict="skip"`` says to leave a ticket that
is already here as it is). Then, in one transaction: users matched by username (a customer's
login only to the login of that customer here) or created without a password, every row
inserted with its primary key and idempotency keys, and the sequences moved past the
restored ids.

Restore writes rows of every app directly, as ``loaddata`` does, rather than through each
app's services: it puts back rows those services wrote, and replays none of their effects
(no doorbell, no timeline event). A restored ticket with work pending is rung by the sweeper.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import DataError, IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.recorder import MigrationRecorder
from django.db.models import Model

from agents.models import AgentProfile
from agents.profiles import CONTENT_FIELDS, policy_with_currency, profile_activate
from state import bundle, signature
from state.parts import PARTS, USERS_LABEL, Part, missing_parts
from state.pseudonyms import PROFILE_LABEL, withheld_model_parameters, withhold_model_parameters
from state.rows import (
    Row,
    columns,
    dump,
    instance,
    is_user_column,
    key_of,
    unique_columns,
    user_rights,
)
from state.verify import (
    active_profile_rules,
    bundle_row_problems,
    chosen_tickets_carried,
    ledger_checks,
    references,
)
from support.rows import forget_key_blocks
from tickets.models import Customer

ON_CONFLICT = ("fail", "skip")
MODEL_PARAMETERS_FLAG = "--model-parameters"
# The values of the model parameters a bundle withheld, given by the operator: by version number.
ParameterValues = dict[int, dict[str, Any]]


class RestoreRefused(Exception):
    """Nothing was written; ``problems`` says why, one sentence each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass
class RestoreReport:
    authenticity: signature.Authenticity  # who wrote the bundle, as far as its signature says
    inserted: Counter[str] = field(default_factory=Counter)
    already_here: Counter[str] = field(default_factory=Counter)
    kept_here: Counter[str] = field(default_factory=Counter)
    skipped_tickets: list[int] = field(default_factory=list)
    users_created: list[str] = field(default_factory=list)
    users_matched: list[str] = field(default_factory=list)
    # The rights of each login created with some (superuser, staff status, groups, permissions).
    rights_given: dict[str, list[str]] = field(default_factory=dict)
    # The bundle's agent profile version made active here (this deployment had none), and its money rules.
    made_active: str | None = None
    warnings: list[str] = field(default_factory=list)


def _check_release(b: bundle.Bundle) -> list[str]:
    problems = []
    apps_in_bundle = {label.split(".")[0] for label in b.labels}
    applied = set(MigrationRecorder(connection).applied_migrations())
    for app, names in sorted(b.manifest.get("migrations", {}).items()):
        if app not in apps_in_bundle:
            continue
        missing = [name for name in names if (app, name) not in applied]
        if missing:
            problems.append(
                f"this database has not applied the migration {app}.{missing[-1]} the bundle was written at; "
                "run manage.py migrate with that release or a later one first"
            )
    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        problems.append(f"this database has {len(pending)} migration(s) not applied; run manage.py migrate first")
    return problems


def _staff_here(user: Any) -> bool:
    """Does this account work here (the admin, a staff group, a permission of its own)? A customer's
    login has none of them."""
    return bool(user.is_staff or user.is_superuser or user.groups.exists() or user.user_permissions.exists())


def _groups_here(names: list[str]) -> set[str]:
    return set(Group.objects.filter(name__in=names).values_list("name", flat=True))


def _permissions_here(names: list[str]) -> dict[str, Permission]:
    """This database's permissions of those ``app_label.codename`` names, by name."""
    codenames = {name.split(".")[1] for name in names}
    found = Permission.objects.filter(codename__in=codenames).select_related("content_type")
    return {name: p for p in found if (name := f"{p.content_type.app_label}.{p.codename}") in names}


def _another_login(row: Row, user: Any, customers: list[Row], *, staff: bool) -> str | None:
    """Why the login ``user`` here is not the bundle's login ``row`` (both staff or both not): None when
    it is. A customer's login is the same only as the login of the same customer here (its row under
    the bundle's id, which the plan then requires to be the bundle's row: the same name, email, made at
    that moment), staff or not; the name alone proves nothing. A member of staff may be a customer here
    that the bundle does not carry (it carries only its tickets' customers); a login with no rights,
    not a customer in the bundle, is no customer's here either."""
    bundled = sorted(c["id"] for c in customers if c.get("user") == row["username"])
    here = Customer.objects.filter(user=user).values_list("pk", flat=True).first()
    if bundled and here not in bundled:
        whose = "no customer's login" if here is None else f"the login of customer #{here}"
        return (
            f"the user {row['username']!r} is the login of customer #{bundled[0]} in the bundle and not the login "
            f"of that customer here (it is {whose}): another person of the same name, who would read and write "
            "the moved tickets; rename one of the two logins first"
        )
    if not bundled and here is not None and not staff:
        return (
            f"the user {row['username']!r} is no customer's login in the bundle and the login of customer #{here} "
            "in this database: another person of the same name; rename one of the two logins first"
        )
    return None


def _ensure_users(users: list[Row], customers: list[Row], report: RestoreReport) -> dict[str, int]:
    """Each bundled user's id here: the account of the same username, when it is the same person, or a
    new one without a password."""
    model = get_user_model()
    ids: dict[str, int] = {}
    strangers = []
    customer_logins = {c.get("user") for c in customers}
    for row in users:
        user = model.objects.filter(**{model.USERNAME_FIELD: row["username"]}).first()
        # A bundle of format 1 carried neither (its users are restored as that release restored them).
        permissions, superuser = row.get("permissions", []), row.get("is_superuser", False)
        bundled_staff = bool(row["is_staff"] or row["groups"] or permissions or superuser)
        if user is not None and _staff_here(user) != bundled_staff:
            # A customer's login in the bundle is a member of staff here (or the reverse): the same
            # name, not the same person. Linking them would hand one the other's tickets (a support
            # team member with no admin access is staff too: their group gives them the inbox).
            strangers.append(
                f"the user {row['username']!r} is {'staff' if bundled_staff else 'a customer'} in the bundle "
                f"and {'staff' if _staff_here(user) else 'not staff'} in this database"
            )
        elif user is not None and (why := _another_login(row, user, customers, staff=bundled_staff)):
            strangers.append(why)
        elif user is not None:
            report.users_matched.append(row["username"])
        elif lacking := sorted(set(row["groups"]) - _groups_here(row["groups"])):
            # Created without them, a member of staff through a group would be a plain login here.
            strangers.append(
                f"the user {row['username']!r} is in the group(s) {', '.join(map(repr, lacking))}, which this "
                "database does not have; create them with their permissions first"
            )
            continue
        elif lacking := sorted(set(permissions) - set(granted := _permissions_here(permissions))):
            # Created without it, their right (to decide approvals, say) would be gone, unsaid.
            strangers.append(
                f"the user {row['username']!r} has the permission(s) {', '.join(map(repr, lacking))} of their own, "
                "which this database does not have; migrate the app that defines them, or create them, first"
            )
            continue
        else:
            user = model(
                **{model.USERNAME_FIELD: row["username"]},
                is_staff=row["is_staff"],
                is_superuser=superuser,
                is_active=row["is_active"],
            )
            user.set_unusable_password()
            user.save()
            user.groups.set(Group.objects.filter(name__in=row["groups"]))
            user.user_permissions.set(granted.values())
            report.users_created.append(row["username"])
            if rights := user_rights(row):
                report.rights_given[row["username"]] = rights
            if "permissions" not in row and not bundled_staff and row["username"] not in customer_logins:
                # Format 1 did not say: a member of staff through permissions of their own, or a superuser,
                # where the bundle was written is a plain login here until someone gives them back.
                report.warnings.append(
                    f"the user {row['username']!r}, no customer's login, was created without any rights: this "
                    "bundle's format (1) did not carry a user's own permissions or superuser flag; give them "
                    "their rights if they had some"
                )
        if user is not None:
            ids[row["username"]] = user.pk
    if strangers:
        raise RestoreRefused(strangers)
    return ids


Owners = dict[str, dict[int, int]]


def _owners(rows: dict[str, list[Row]]) -> Owners:
    """For parts whose rows hang off another part's row: that row's id -> its ticket."""
    labels = {p.via[0] for p in PARTS if p.via}
    return {label: {r["id"]: r["ticket_id"] for r in rows.get(label, [])} for label in labels}


def _ticket_of(part: Part, row: Row, owners: Owners) -> int | None:
    """The ticket a bundled row belongs to (None for shared rows)."""
    if part.ticket_column:
        return row[part.ticket_column]
    if part.via:
        label, column = part.via
        return owners[label].get(row[column])
    return None


@dataclass
class _Plan:
    insert: dict[str, list[Row]]
    conflicts: list[str]
    # Conflicts of rows of a ticket that is already here: resolved by skipping the ticket.
    ticket_conflicts: dict[int, list[str]]


def _plan(rows: dict[str, list[Row]], user_ids: dict[str, int], report: RestoreReport, on_conflict: str) -> _Plan:
    plan = _Plan(insert={}, conflicts=[], ticket_conflicts={})
    owners = _owners(rows)
    present_tickets: set[int] = set()  # the bundled tickets already here, from the Ticket part
    # Rows the bundle has of a ticket that is here, which this database lacks: the ticket is here as
    # it was before them (an earlier bundle), and skipping it would drop them (a refund paid since).
    lacking: dict[int, list[str]] = {}
    tickets_here: set[int] = set()  # the bundled tickets' ids taken here, by them or by others
    for part in PARTS:
        model = part.model
        pk_key = model._meta.pk.attname
        bundled = rows.get(part.label, [])
        here = {r[pk_key]: r for r in dump(model.objects.filter(pk__in=[r[pk_key] for r in bundled]))}
        if part.label == "tickets.Ticket":
            # The bundle's ticket is here only if the row under its id is that ticket (its customer,
            # made at that moment); another ticket under that id is a conflict skipping cannot settle.
            present_tickets = {row[pk_key] for row in bundled if _same_ticket(here.get(row[pk_key]), row)}
            tickets_here = set(here)
        to_insert = []
        kept: set[Any] = set()  # shared rows of this deployment kept instead of the bundle's (skip)
        for row in bundled:
            pk = row[pk_key]
            ticket = _ticket_of(part, row, owners)
            if pk in here:
                if part.shared and _same_row(part, here[pk], row):
                    report.already_here[part.label] += 1
                    continue
                what = f"{part.label} {pk} is already in this database"
                if part.shared:
                    what += f" with other values ({', '.join(part.differing(here[pk], row))})"
                    if on_conflict == "skip" and not part.identity:
                        report.kept_here[part.label] += 1
                        report.warnings.append(f"{what}: kept as it is here")
                        continue
                    plan.conflicts.append(what)
                    continue
                plan.ticket_conflicts.setdefault(ticket, []).append(what)
                continue
            if ticket in present_tickets:
                lacking.setdefault(ticket, []).append(f"{part.label} {pk}")
            to_insert.append(row)
        # Unique columns other than the primary key (idempotency keys, order numbers, a customer's login).
        for f in unique_columns(model):
            key = key_of(f)
            wanted = {}
            for row in to_insert:
                value = row.get(key)
                if value is None:
                    continue
                wanted[user_ids[value] if is_user_column(f) else value] = row
            if not wanted:
                continue
            taken = model.objects.filter(**{f"{f.attname}__in": list(wanted)}).values_list(f.attname, "pk")
            for value, pk_here in taken:
                row = wanted[value]
                what = (
                    f"{part.label} {row[pk_key]}: its {f.name} {row.get(key)!r} is already used here by row {pk_here}"
                )
                ticket = _ticket_of(part, row, owners)
                if part.shared and on_conflict == "skip" and not part.identity:
                    kept.add(row[pk_key])
                    report.kept_here[part.label] += 1
                    report.warnings.append(f"{what}: kept as it is here")
                elif part.shared or ticket is None:
                    plan.conflicts.append(what)
                else:
                    plan.ticket_conflicts.setdefault(ticket, []).append(what)
        plan.insert[part.label] = [row for row in to_insert if row[pk_key] not in kept]
        if part.label == "agents.AgentProfile" and model.objects.filter(is_active=True).exists():
            # A restored version is what its runs are pinned to; which version new runs start
            # with stays this deployment's choice.
            plan.insert[part.label] = [{**row, "is_active": False} for row in plan.insert[part.label]]
    skip = set()
    for ticket, whats in sorted(plan.ticket_conflicts.items(), key=lambda item: item[0] or 0):
        if on_conflict == "skip" and ticket in present_tickets and ticket in lacking:
            rows_lacking = lacking[ticket]
            plan.conflicts.append(
                f"ticket #{ticket} is here without rows the bundle has of it ({', '.join(rows_lacking[:5])}"
                f"{f' and {len(rows_lacking) - 5} more' if len(rows_lacking) > 5 else ''}): it is here as it was "
                "before them, and skipping it would lose them (a refund paid since would be refundable again); "
                "restore this bundle into a database without that ticket"
            )
            continue
        if on_conflict == "skip" and ticket in present_tickets:
            skip.add(ticket)
            continue
        if on_conflict == "skip":
            why = "is not here" if ticket not in tickets_here else "here is another ticket"
            whats = [f"{w} (ticket #{ticket} {why}, so skipping it does not resolve this; " for w in whats]
            whats = [w + "restoring under new ids is not supported)" for w in whats]
        plan.conflicts.extend(whats)
    if skip:
        report.skipped_tickets = sorted(skip)
        for part in PARTS:
            if part.ticket_column or part.via:
                plan.insert[part.label] = [
                    r for r in plan.insert[part.label] if _ticket_of(part, r, owners) not in skip
                ]
    return plan


def _same_row(part: Part, here: Row, bundled: Row) -> bool:
    """Is the row here the bundled one? A profile version is, too, when it differs only in the values of
    the model parameters the bundle withheld: those are this deployment's own (its keys)."""
    if part.same(here, bundled):
        return True
    if part.label != PROFILE_LABEL or not withheld_model_parameters(bundled.get("model_parameters")):
        return False
    return part.same({**here, "model_parameters": withhold_model_parameters(here.get("model_parameters"))}, bundled)


def parameter_values(given: Any) -> ParameterValues:
    """The operator's values of withheld model parameters, as read from their JSON file: an object of
    version numbers, each an object of parameter names and values. Raises ``RestoreRefused`` otherwise."""
    shape = (
        f"{MODEL_PARAMETERS_FLAG} names a JSON object of agent profile version numbers, each an object of the "
        'values of its withheld model parameters, such as {"3": {"extra_headers": {"X-Key": "..."}}}'
    )
    if not isinstance(given, dict):
        raise RestoreRefused([shape])
    values: ParameterValues = {}
    for version, parameters in given.items():
        if not (isinstance(version, str) and version.isdigit()) or not isinstance(parameters, dict):
            raise RestoreRefused([shape])
        values[int(version)] = parameters
    return values


def _fill_withheld(row: Row, values: ParameterValues, problems: list[str]) -> Row:
    """A profile version about to be written here with the operator's values of its withheld model
    parameters; what is missing, or given for a parameter the bundle carried by value, is a problem."""
    withheld = withheld_model_parameters(row.get("model_parameters"))
    given = values.get(row["version"], {})
    carried = sorted(set(given) - set(withheld))
    if carried:
        problems.append(
            f"agent profile version {row['version']}: {', '.join(carried)} carried by the bundle with its value, "
            f"not given by {MODEL_PARAMETERS_FLAG} (only the values the bundle withheld are)"
        )
    missing = [name for name in withheld if name not in given]
    if missing:
        problems.append(
            f"agent profile version {row['version']} sends its model endpoint model parameters whose values a "
            f"bundle never carries (they may hold keys): {', '.join(missing)}; give them with "
            f'{MODEL_PARAMETERS_FLAG} FILE, a JSON object such as {{"{row["version"]}": '
            f"{{{', '.join(f'{json.dumps(name)}: ...' for name in missing)}}}}} with the values they have where "
            "the bundle was made (runs pinned to the version ask the model with them)"
        )
    if not withheld:
        return row
    return {**row, "model_parameters": {**row["model_parameters"], **{k: given[k] for k in withheld if k in given}}}


def _profile_content_ok(active: Any) -> bool:
    types = {"version": int, "system_prompt": str, "model": str, "model_parameters": dict, "tools": list}
    return (
        isinstance(active, dict)
        and set(active) == {"version", *CONTENT_FIELDS}
        and all(isinstance(active[name], kind) and not isinstance(active[name], bool) for name, kind in types.items())
        and isinstance(active["approval_policy"], dict)
        and active["version"] > 0
    )


def _keep_the_active_version(active: dict[str, Any], report: RestoreReport, values: ParameterValues) -> None:
    """A deployment with no active agent profile version (a new one) takes the one that was active
    where the bundle was made: its rules (the approval threshold, the tools that always need an
    approval) stay in force after a move, rather than those of whichever restored version is newest."""
    if AgentProfile.objects.filter(is_active=True).exists():
        return
    # A version naming no currency (written before versions named it) is read in this deployment's.
    content = {name: active[name] for name in CONTENT_FIELDS}
    content["approval_policy"] = policy_with_currency(content["approval_policy"])
    here = AgentProfile.objects.filter(version=active["version"]).first()
    if here is None:
        problems: list[str] = []
        content = _fill_withheld({"version": active["version"], **content}, values, problems)
        if problems:
            raise RestoreRefused(problems)
        content.pop("version")
        AgentProfile.objects.create(
            version=active["version"], note="active where the restored bundle was made", **content
        )
    elif any(
        (policy_with_currency(here.approval_policy) if name == "approval_policy" else getattr(here, name)) != value
        and not (name == "model_parameters" and withhold_model_parameters(here.model_parameters) == value)
        for name, value in content.items()
    ):
        raise RestoreRefused(
            [f"agent profile version {active['version']}, active where the bundle was made, is another version here"]
        )
    profile_activate(version=active["version"], user=None)
    report.warnings.append(f"agent profile version {active['version']}, active where the bundle was made, is active")


def _same_ticket(here: Row | None, bundled: Row) -> bool:
    """Is the ticket row here the bundle's ticket (not another one that happens to have its id)?"""
    return here is not None and all(here.get(key) == bundled.get(key) for key in ("customer_id", "created_at"))


def state_restore(
    *,
    path: Path,
    on_conflict: str = "fail",
    allow_unsigned: bool = False,
    model_parameters: ParameterValues | None = None,
) -> RestoreReport:
    """Restore the bundle at ``path`` into this database. Raises ``bundle.BundleError`` for a bundle
    that cannot be trusted (``bundle.SignatureError``: its signature does not hold, or it has none
    this deployment can check and ``allow_unsigned`` is not given) and ``RestoreRefused`` for one that
    does not fit; nothing is written then. ``model_parameters``: the values of the model parameters
    the bundle withheld, by profile version (``parameter_values``), for the versions written here."""
    if on_conflict not in ON_CONFLICT:
        raise ValueError(on_conflict)
    b = bundle.read(path, allow_unsigned=allow_unsigned)
    problems = _check_release(b)
    missing = missing_parts(b.labels)  # restoring the rest would lose what was cut out silently
    if missing:
        problems.append(f"the bundle does not carry these parts: {', '.join(missing)}")
    rows: dict[str, Any] = {label: b.rows(label) for label in b.labels}
    for label in [*(part.label for part in PARTS), USERS_LABEL]:
        rows.setdefault(label, [])
    malformed = bundle_row_problems(b, rows)
    if malformed:
        raise RestoreRefused(problems + malformed)  # what follows reads the rows, which are not what they should be
    if not missing:
        # Every row of a ticket points inside the bundle: none lands in a ticket of this database.
        problems += references({**rows, USERS_LABEL: rows.get(USERS_LABEL, [])}).violations
        problems += chosen_tickets_carried(rows, b.manifest).violations
        # And the ledger's invariants hold on what would be written (a refund for another amount than
        # its call asked, a paid refund without its approval, a row twice, a gap in a timeline).
        for check in ledger_checks({**rows, USERS_LABEL: rows.get(USERS_LABEL, [])}, b.manifest.get("settings")):
            problems += [f"{check.name}: {violation}" for violation in check.violations]
    users = rows.get(USERS_LABEL, [])
    known_users = {u["username"] for u in users}
    for part in PARTS:
        for f in (f for f in columns(part.model) if is_user_column(f)):
            strangers = {r[f.name] for r in rows[part.label] if r.get(f.name) is not None} - known_users
            if strangers:
                problems.append(f"{part.label}.{f.name} names users the bundle does not carry: {sorted(strangers)}")
    if problems:
        raise RestoreRefused(problems)
    report = RestoreReport(authenticity=b.authenticity)
    if not b.manifest.get("personal_data"):
        report.warnings.append(
            "this bundle was written without personal data: customers have pseudonyms and their words are withheld"
        )
    active = b.manifest.get("active_profile")
    if active is not None and not _profile_content_ok(active):
        raise RestoreRefused(["the manifest's active agent profile version is not a version's number and content"])
    try:
        _write(rows, users, report, on_conflict, active, model_parameters or {})
    except (IntegrityError, DataError) as exc:
        # A constraint the plan does not check beforehand (one spanning several columns, or a
        # condition): the database refused the rows and the transaction rolled back.
        raise RestoreRefused([f"the database refused the rows: {str(exc).strip()}"]) from None
    return report


# The sequence of a table, moved to its highest id or left where it is, whichever is further: never back
# (a sequence never used, of an empty table, still starts at 1).
_MOVE_PAST_SQL = """
SELECT setval(seq, GREATEST(COALESCE(top, 1), COALESCE(last, 1)), top IS NOT NULL OR last IS NOT NULL)
FROM (SELECT seq, (SELECT max({pk}) FROM {table}) AS top, pg_sequence_last_value(seq) AS last
      FROM (SELECT pg_get_serial_sequence(%s, %s)::regclass AS seq) AS named) AS found
"""


def _move_keys_past_restored_rows(models: list[type[Model]]) -> None:
    """Each table's sequence past its restored ids, never back: on a live deployment another process may
    hold a key it took and has not committed yet (a customer's message being written), which the highest
    id read here does not show; moved back below it, the next row written was given that key again."""
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for model in models:
            table, pk = model._meta.db_table, model._meta.pk.column
            cursor.execute(_MOVE_PAST_SQL.format(pk=quote(pk), table=quote(table)), [table, pk])


def _write(
    rows: dict[str, Any],
    users: list[Row],
    report: RestoreReport,
    on_conflict: str,
    active: dict[str, Any] | None,
    values: ParameterValues,
) -> None:
    with transaction.atomic():
        had_an_active_version = AgentProfile.objects.filter(is_active=True).exists()
        user_ids = _ensure_users(users, rows.get("tickets.Customer", []), report)
        plan = _plan(rows, user_ids, report, on_conflict)
        if plan.conflicts:
            raise RestoreRefused(plan.conflicts)
        # A version written here asks the model as it did where the bundle was made, or is not written.
        withheld: list[str] = []
        plan.insert[PROFILE_LABEL] = [_fill_withheld(row, values, withheld) for row in plan.insert[PROFILE_LABEL]]
        if withheld:
            raise RestoreRefused(withheld)
        for part in PARTS:
            objects = [instance(part.model, row, user_ids) for row in plan.insert[part.label]]
            part.model.objects.bulk_create(objects, batch_size=500)
            report.inserted[part.label] = len(objects)
        # Past the restored ids before anything else is created here: a row made by the restore
        # itself (the active profile version) would otherwise take a restored row's id.
        _move_keys_past_restored_rows([p.model for p in PARTS])
        if active is not None:
            _keep_the_active_version(active, report, values)
        made_active = None if had_an_active_version else AgentProfile.objects.filter(is_active=True).first()
        if made_active is not None:  # the bundle's (a restored row, or the manifest's version): its rules rule now
            fields = ("version", "approval_policy", "tools")
            report.made_active = active_profile_rules({name: getattr(made_active, name) for name in fields})
        transaction.on_commit(forget_key_blocks)
