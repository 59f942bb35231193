"""verify_state: what a bundle (or a database, against a bundle) holds, and whether it is whole.

The report answers five questions: identity (which tickets, customers, profile versions),
knowledge (messages, the help articles the agent used), permissions (tools and approval
rules in force), activity (runs, calls, refunds, pending approvals) and verification
(checksums, counts, invariants). Any failed check makes the whole report fail.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.utils.dateparse import parse_datetime

from agents.calls import arguments_digest
from agents.models import (
    ACTIVE_RUN_STATUSES,
    FINAL_CALL_STATUSES,
    PERSON_TOOK_OVER,
    RESERVING_REFUND_STATUSES,
    CallStatus,
    ConfirmationDecision,
)
from agents.profiles import content_problems
from state import bundle, signature
from state.export import collect
from state.parts import PARTS, REFUND_TOOL, USERS_LABEL, Selection, is_user_model, missing_parts, part_named
from state.pseudonyms import PROFILE_LABEL, withheld_model_parameters
from state.rows import (
    Row,
    columns,
    is_user_column,
    key_of,
    row_problems,
    unknown_keys,
    user_rights,
    user_row_problems,
)
from tickets import attachments
from tickets.models import ActorKind
from tickets.money import format_money

# A refund in these states may have moved money: it must have had any approval it needed.
MONEY_MOVED_STATUSES = ("submitted", "pending", "succeeded", "uncertain")


@dataclass
class Check:
    name: str
    violations: list[str] = field(default_factory=list)
    detail: str = ""

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass
class Report:
    title: str
    sections: dict[str, list[str]] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # What the operator must read before anything else (an unsigned bundle accepted, and what it grants).
    alarms: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def render(self) -> str:
        lines = [self.title, ""]
        if self.alarms:
            lines += [f"!!! {alarm}" for alarm in self.alarms] + [""]
        for n, (name, body) in enumerate(self.sections.items(), start=1):
            lines.append(f"{n}. {name}")
            lines += [f"   {line}" for line in body] or ["   (nothing)"]
            lines.append("")
        lines.append(f"{len(self.sections) + 1}. Verification")
        for check in self.checks:
            lines.append(
                f"   {'ok    ' if check.ok else 'FAILED'} {check.name}" + (f": {check.detail}" if check.detail else "")
            )
            lines += [f"          - {v}" for v in check.violations[:20]]
            if len(check.violations) > 20:
                lines.append(f"          ... and {len(check.violations) - 20} more")
        lines += [f"   note: {note}" for note in self.notes[:20]]
        failed = [c for c in self.checks if not c.ok]
        lines += ["", "Result: OK" if not failed else f"Result: FAILED ({len(failed)} of {len(self.checks)} checks)"]
        return "\n".join(lines)


def _by_pk(label: str, rows: list[Row]) -> dict[Any, Row]:
    if label == USERS_LABEL:
        return {r["username"]: r for r in rows}
    pk = part_named(label).model._meta.pk.attname
    return {r[pk]: r for r in rows}


def verify(path: Path, *, database: bool, allow_unsigned: bool = False) -> Report:
    """The report on the bundle at ``path`` (or on this database against it, with ``database``). A bundle
    whose signature does not hold is reported as such and read no further; one with no signature, or
    none this deployment can check, likewise unless ``allow_unsigned``: then it is read, and the report
    opens with the rights it would give."""
    where = f"the database {connection.settings_dict['NAME']} against the bundle" if database else "the bundle"
    report = Report(title=f"State bundle {path}: checking {where}")
    try:
        b = bundle.read(path, allow_unsigned=allow_unsigned)
        bundled = {label: b.rows(label) for label in b.labels}
    except bundle.SignatureError as exc:
        report.checks.append(Check("signature", violations=exc.problems))
        return report
    except bundle.BundleError as exc:
        report.checks.append(Check("checksums and format", violations=exc.problems))
        return report
    manifest = b.manifest
    report.title += (
        f"\n  format {manifest['format_version']}, written {manifest['created_at']} by {manifest['app']['name']} "
        f"{manifest['app']['version']} ({manifest['app'].get('revision') or 'revision unknown'}); "
        f"personal data {'included' if manifest['personal_data'] else 'pseudonymised'}"
    )
    if b.authenticity.proven:
        report.checks.append(Check("signature", detail=b.authenticity.detail))
    else:
        accepted = f"accepted only because {signature.ALLOW_UNSIGNED_FLAG} was given"
        report.checks.append(Check("signature", detail=f"NOT AUTHENTICATED, {accepted}"))
        report.alarms.append(f"NOT AUTHENTICATED: {b.authenticity.detail}; {accepted}")
    report.checks.append(
        Check(
            "checksums and format",
            detail=f"{len(b.files)} files match their SHA-256; format {manifest['format_version']}",
        )
    )
    shapes = Check("every row is a row of its table", violations=bundle_row_problems(b, bundled))
    report.checks.append(shapes)
    if not shapes.ok:  # what follows reads the rows, which are not what they should be
        return report
    if not b.authenticity.proven:
        report.alarms += rights_alarm(bundled.get(USERS_LABEL, []), bundled.get("agents.AgentProfile", []), manifest)
    if database:
        rows = _compare_database(bundled, manifest, report)
    else:
        rows = bundled
        report.checks.append(_counts(manifest, bundled))
        report.checks.append(references(rows))
        report.checks.append(chosen_tickets_carried(rows, manifest))
    missing = missing_parts(bundled)
    report.checks.append(
        Check("every part is in the bundle", violations=[f"the bundle does not carry {label}" for label in missing])
    )
    rows = {part.label: rows.get(part.label, []) for part in PARTS} | {USERS_LABEL: rows.get(USERS_LABEL, [])}
    report.sections = {
        "Identity": _identity(rows, manifest),
        "Knowledge": _knowledge(rows),
        "Permissions": _permissions(rows, manifest),
        "Activity": _activity(rows),
    }
    report.checks += ledger_checks(rows, manifest.get("settings"))
    return report


def _counts(manifest: dict[str, Any], bundled: dict[str, list[Row]]) -> Check:
    """The manifest's counts are the rows the bundle carries: they are what the report shows."""
    counts = manifest["counts"]
    check = Check("counts", detail=", ".join(f"{label} {n}" for label, n in counts.items() if n))
    for label in sorted(set(counts) | set(bundled)):
        said, carried = counts.get(label, 0), len(bundled.get(label, []))
        if said != carried:
            check.violations.append(f"{label}: the manifest counts {said}, the bundle carries {carried}")
    return check


def _columns_of_the_bundle(b: bundle.Bundle) -> dict[str, set[str]]:
    """Each part's columns that its table had at the migrations the bundle was written at: every row
    carries them all. Only a column added by a later migration of this release may be left out (it
    takes its default); at the same migrations, a row without a column was edited or cut."""
    listed = b.manifest.get("migrations")
    listed = listed if isinstance(listed, dict) else {}
    loader = MigrationLoader(connection)
    nodes = [
        (app, name)
        for app, names in listed.items()
        if isinstance(names, list)
        for name in names
        if (app, name) in loader.graph.nodes
    ]
    then = loader.project_state(nodes, at_end=True)
    required: dict[str, set[str]] = {}
    for part in PARTS:
        meta = part.model._meta
        keys = {key_of(f): f.name for f in columns(part.model)}
        if meta.app_label not in listed:
            required[part.label] = set(keys)  # the manifest does not say: nothing may be left out
            continue
        historical = then.models.get((meta.app_label, meta.model_name))
        had = historical.fields if historical is not None else {}
        required[part.label] = {key for key, name in keys.items() if name in had}
    return required


def bundle_row_problems(b: bundle.Bundle, rows: dict[str, list[Any]]) -> list[str]:
    """Why the bundle's rows (by part label) cannot be rows of their tables here, checked before anything
    reads them (verify's ledger checks, restore): each part a table this release knows, each row an
    object with the columns its table had at the bundle's migrations and none this release does not
    know, each value one its column takes."""
    required = _columns_of_the_bundle(b)
    known = {p.label for p in PARTS} | {USERS_LABEL}
    problems = [
        f"the bundle has a table this release does not know ({label}); restore it with the release "
        f"that wrote it ({b.manifest['app']['version']}) or later"
        for label in b.labels
        if label not in known
    ]
    malformed: list[str] = []
    for part in PARTS:
        for row in rows.get(part.label, []):
            if not isinstance(row, dict):
                malformed.append(f"{part.label}: a row that is not an object ({type(row).__name__})")
                continue
            extra = unknown_keys(part.model, row)
            if extra:
                problems.append(
                    f"{part.label} rows have columns this release does not know: {', '.join(sorted(extra))}"
                )
                break
            found = row_problems(part.model, row, required=required[part.label])
            if not found and part.label == PROFILE_LABEL:
                # A version its runs resume on: one the admin would refuse to make is no version of this
                # release's (a threshold of "lots" is read when a refund is decided, in the worker).
                found = [f"agent profile version {row['version']}: {p}" for p in content_problems(row)]
            malformed += found
    for user in rows.get(USERS_LABEL, []):
        malformed += user_row_problems(user, format_version=b.manifest["format_version"])
    active = b.manifest.get("active_profile")
    if isinstance(active, dict):
        # Made active by a restore into a deployment with none: new runs start on it.
        version = active.get("version")
        problems += [f"the manifest's active agent profile version {version}: {p}" for p in content_problems(active)]
    more = [f"and {len(malformed) - 20} more such problems"] if len(malformed) > 20 else []
    return problems + malformed[:20] + more


def ledger_checks(rows: dict[str, list[Row]], settings_in_force: dict[str, Any] | None = None) -> list[Check]:
    """The ledger's invariants, checked on a bundle's rows (by part label, every part present): what
    ``verify`` reports, and what ``restore`` refuses to write in when one fails. ``settings_in_force``:
    the settings the manifest says shaped the agent where the bundle was written."""
    return [
        _one_row_per_key(rows),
        _one_refund_per_key(rows),
        _approved_before_paid(rows),
        _one_unreviewed_refund_per_order(rows),
        _asked_by_its_rules_before_it_runs(rows),
        _approvals_given_by_staff(rows),
        _confirmations_given_by_customers(rows),
        _asked_to_confirm_before_it_runs(rows, settings_in_force),
        _refund_as_asked(rows),
        _every_paid_call_has_its_refund(rows),
        _every_waiting_call_has_its_request(rows),
        _gapless(rows),
    ]


def _one_row_per_key(rows: dict[str, list[Row]]) -> Check:
    check = Check("no row twice")
    for label, found in rows.items():
        if not found:
            continue
        # A user is carried by username: two rows of one name (with other rights) are two readings of one login.
        pk = "username" if label == USERS_LABEL else part_named(label).model._meta.pk.attname
        for key, count in Counter(r.get(pk) for r in found if isinstance(r, dict)).items():
            if count > 1:
                check.violations.append(f"{label} {key} is in the bundle {count} times")
    return check


def _refund_as_asked(rows: dict[str, list[Row]]) -> Check:
    """A refund is for the amount its tool call asked (what staff approved, when they were asked)."""
    check = Check("every refund is the amount its call asked for")
    calls = {c["id"]: c for c in rows["agents.ToolCall"]}
    for refund in rows["agents.Refund"]:
        call = calls.get(refund.get("tool_call_id"))
        if call is None:
            continue  # reported by the key check
        asked = (call.get("arguments") or {}).get("amount_cents")
        if asked != refund["amount_cents"]:
            check.violations.append(
                f"refund {refund['idempotency_key']}: {refund['amount_cents']} cents, its call asked for {asked!r}"
            )
    return check


def _every_paid_call_has_its_refund(rows: dict[str, list[Row]]) -> Check:
    """A refund call that succeeded made its refund row before it asked the provider: without that row
    (cut from its part), a restored order would show nothing paid back and could be refunded again."""
    check = Check("every refund call that ran has its refund")
    refunded = {r.get("tool_call_id") for r in rows["agents.Refund"]}
    for call in rows["agents.ToolCall"]:
        if call["name"] == REFUND_TOOL and call["status"] == CallStatus.SUCCEEDED and call["id"] not in refunded:
            check.violations.append(f"tool call {call['id']} ({REFUND_TOOL}, succeeded) has no refund in the bundle")
    return check


def _every_waiting_call_has_its_request(rows: dict[str, list[Row]]) -> Check:
    """A call paused on a staff approval has its approval request (the pause and the request commit in one
    transaction): without it no one could ever decide, and the restored run waited for good."""
    check = Check("every call awaiting an approval has its request")
    asked = {a.get("tool_call_id") for a in rows["approvals.ApprovalRequest"]}
    for call in rows["agents.ToolCall"]:
        if call["status"] == CallStatus.AWAITING_APPROVAL and call["id"] not in asked:
            check.violations.append(
                f"tool call {call['id']} ({call['name']}) awaits an approval that is not in the bundle"
            )
    return check


def _compare_database(bundled: dict[str, list[Row]], manifest: dict, report: Report) -> dict[str, list[Row]]:
    """This database's rows of the bundle's tickets, dumped as export would; every bundled row must be here."""
    selection = Selection(ticket_ids=tuple(manifest["selection"]["tickets"]))
    # Only the words the bundle withheld are hunted in the rest: a customer's words written since do not
    # rewrite, in this dump, a row restored from the bundle (which would then read as altered).
    quoted_from = {label: set(_by_pk(label, rows)) for label, rows in bundled.items() if label != USERS_LABEL}
    collected = collect(selection, personal_data=manifest["personal_data"], quoted_from=quoted_from)
    current = {**collected.rows, USERS_LABEL: collected.users}
    missing = Check("every bundled row is in the database")
    altered = Check("rows that are never changed are as in the bundle")
    policy = Check("approval policy and tool rules in force are the bundle's")
    changed = 0
    counts = []
    for label, rows in bundled.items():
        here = _by_pk(label, current.get(label, []))
        counts.append(f"{label} {len(rows)}/{len(here)}")
        part = part_named(label) if label != USERS_LABEL else None
        for key, row in _by_pk(label, rows).items():
            if key not in here:
                missing.violations.append(f"{label} {key}")
                continue
            if here[key] == row or (part is not None and part.same(here[key], row)):
                continue
            differing = sorted(k for k in row.keys() | here[key].keys() if row.get(k) != here[key].get(k))
            what = f"{label} {key}: {', '.join(differing)}"
            written_once = part.altered(here[key], row) if part is not None else []
            if part is not None and written_once:
                altered.violations.append(what if part.immutable else f"{label} {key}: {', '.join(written_once)}")
            elif label in ("agents.ApprovalPolicy", "agents.ToolApprovalRule"):
                policy.violations.append(what)
            elif label != USERS_LABEL:  # a user's groups and flags are the deployment's to change
                changed += 1
                report.notes.append(f"changed since the bundle: {what}")
    for label in ("agents.ApprovalPolicy", "agents.ToolApprovalRule"):
        extra = set(_by_pk(label, current.get(label, []))) - set(_by_pk(label, bundled.get(label, [])))
        policy.violations += [f"{label} {key} is in force here but not in the bundle" for key in sorted(extra)]
    missing.detail = "bundle/database rows: " + ", ".join(counts)
    report.checks += [missing, altered, policy, _attachment_files(bundled, current)]
    report.notes.insert(0, f"{changed} row(s) changed since the bundle was written (the work moved on)")
    return current


def _attachment_files(bundled: dict[str, list[Row]], current: dict[str, list[Row]]) -> Check:
    """Every bundled attachment here has its file in this deployment's storage, with the bytes it had: the
    bundle carries the records only, so a move that did not copy the media storage lost the photos."""
    check = Check("every attachment's file is in this deployment's storage, as stored")
    here = _by_pk("tickets.Attachment", current.get("tickets.Attachment", []))
    checked = 0
    for key in _by_pk("tickets.Attachment", bundled.get("tickets.Attachment", [])):
        row = here.get(key)
        if row is None:
            continue  # reported as a missing row
        checked += 1
        problem = attachments.stored_file_problem(storage_name=row["storage_name"], sha256=row["sha256"])
        if problem:
            check.violations.append(f"tickets.Attachment {key}: {problem}")
    check.detail = f"{checked} file(s) checked" if check.ok else ""
    return check


def references(rows: dict[str, list[Row]]) -> Check:
    """Every foreign key of a bundled row points at a row of the bundle: the bundle is whole."""
    check = Check("every reference inside the bundle resolves")
    users = {u["username"] for u in rows.get(USERS_LABEL, [])}
    keys = {label: set(_by_pk(label, r)) for label, r in rows.items() if label != USERS_LABEL}
    for part in PARTS:
        for f in columns(part.model):
            if not f.is_relation:
                continue
            values = {r.get(f.name if is_user_column(f) else f.attname) for r in rows.get(part.label, [])} - {None}
            if is_user_model(f.related_model):
                targets, what = users, "auth.User"
            else:
                what = f.related_model._meta.label
                if what not in keys:
                    if values:
                        check.violations.append(f"{part.label}.{f.name} points at {what}, which is not in the bundle")
                    continue
                targets = keys[what]
            for value in sorted(values - targets, key=str):
                check.violations.append(f"{part.label}.{f.name} = {value!r}: no such {what} in the bundle")
    # A timeline event names the rows it is about: one of them cut from its part, the restored ticket lost
    # it (a customer's message shown nowhere and never answered; an approval request staff could never
    # decide, its run waiting for it for good).
    for event in rows.get("tickets.TicketEvent", []):
        payload = event.get("payload")
        if not isinstance(payload, dict):
            continue
        for name, label in EVENT_REFERENCES.items():
            value = payload.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value not in keys.get(label, set()):
                check.violations.append(
                    f"ticket #{event.get('ticket_id')}'s event {event.get('seq')} ({event.get('kind')}) names "
                    f"{label} {value}, which is not in the bundle"
                )
    return check


# The ids a timeline event's payload names, and the part each is a row of.
EVENT_REFERENCES = {
    "message_id": "tickets.Message",
    "run_id": "agents.AgentRun",
    "call_id": "agents.ToolCall",
    "approval_id": "approvals.ApprovalRequest",
}


def chosen_tickets_carried(rows: dict[str, list[Row]], manifest: dict[str, Any]) -> Check:
    """Every ticket the manifest says was exported (chosen, or carried for its refunds) is in the bundle:
    one cut out of every part, with its messages, left a bundle whose every other check held, and the
    restore brought the rest back without a word of what was lost."""
    check = Check("every ticket exported is in the bundle")
    selection = manifest.get("selection") or {}
    named = [*selection.get("tickets", []), *selection.get("carried_for_refunds", [])]
    carried = {row.get("id") for row in rows.get("tickets.Ticket", [])}
    for pk in sorted(set(named) - carried):
        check.violations.append(f"ticket #{pk} was exported and is not in the bundle")
    check.detail = f"{len(carried)} ticket(s)"
    return check


def _one_refund_per_key(rows: dict[str, list[Row]]) -> Check:
    check = Check("one refund per idempotency key, the key of its tool call")
    refunds = rows["agents.Refund"]
    for key, count in Counter(r["idempotency_key"] for r in refunds).items():
        if count > 1:
            check.violations.append(f"{count} refunds under the key {key}")
    calls = {c["id"]: c for c in rows["agents.ToolCall"]}
    for refund in refunds:
        call = calls.get(refund["tool_call_id"])
        if call is None or call["idempotency_key"] != refund["idempotency_key"]:
            check.violations.append(f"refund {refund['id']}: its key is not its tool call's")
    check.detail = f"{len(refunds)} refund(s)"
    return check


def _policy_of(rows: dict[str, list[Row]]) -> Callable[[Row], tuple[set[str], dict[str, Any]]]:
    """The rules a call was recorded under: (the tools that always need an approval, the approval
    policy's values) of its run's pinned profile version, or of the policy and rules in the bundle for
    a run pinned to none (a value a version lacks is the bundle's policy's)."""
    run_profile = {r["id"]: r.get("profile_id") for r in rows["agents.AgentRun"]}
    profiles = {p["id"]: p for p in rows.get("agents.AgentProfile", [])}
    ruled = {r["tool_name"] for r in rows["agents.ToolApprovalRule"] if r["requires_approval"]}
    policies = rows["agents.ApprovalPolicy"]
    tables = dict(policies[0]) if policies else {}

    def policy_of(call: Row) -> tuple[set[str], dict[str, Any]]:
        profile = profiles.get(run_profile.get(call.get("run_id")))
        if profile is None:
            return ruled, tables
        always = {t["name"] for t in profile.get("tools") or [] if isinstance(t, dict) and t.get("requires_approval")}
        policy = profile.get("approval_policy")
        return always, {**tables, **(policy if isinstance(policy, dict) else {})}

    return policy_of


def _approval_rules(rows: dict[str, list[Row]]) -> Callable[[Row], tuple[set[str], int | None, str | None]]:
    """The approval rules a call was recorded under (``_policy_of``): (the tools that always need an
    approval, the refund threshold, the currency of the policy's amounts where its version names one)."""
    policy_of = _policy_of(rows)

    def rules_of(call: Row) -> tuple[set[str], int | None, str | None]:
        always, policy = policy_of(call)
        currency = policy.get("currency")
        return always, policy.get("refund_threshold_cents"), currency.lower() if isinstance(currency, str) else None

    return rules_of


def _order_currency(rows: dict[str, list[Row]]) -> Callable[[Row], str | None]:
    """The currency of the order a refund call names (its customer's order of that number, as numbers are
    compared), or None when it names none of them, or several in different currencies."""
    customer_of = {t["id"]: t.get("customer_id") for t in rows["tickets.Ticket"]}
    currencies: dict[tuple[Any, str], set[str]] = defaultdict(set)
    for order in rows["tickets.Order"]:
        currencies[(order.get("customer_id"), str(order.get("number") or "").strip().upper())].add(
            str(order.get("currency") or "").lower()
        )

    def currency_of(call: Row) -> str | None:
        arguments = call.get("arguments") if isinstance(call.get("arguments"), dict) else {}
        number = str(arguments.get("order_number") or "").strip().upper()
        found = currencies.get((customer_of.get(call.get("ticket_id")), number), set())
        return next(iter(found)) if len(found) == 1 else None

    return currency_of


def _approved_before_paid(rows: dict[str, list[Row]]) -> Check:
    """No refund that may have moved money needed an approval without an approved request for its exact arguments.

    Whether it needed one is judged from the rules it was paid under, not only from the call's own
    flag: its run's pinned profile version (the threshold, the tools that always need an approval),
    or the policy and rules in the bundle for a run pinned to none. A rule made stricter since (a
    lower threshold) does not make a refund paid rightly under the old one a violation. A customer
    flagged "every refund reviewed" is not dated in the ledger: the call's own flag records it.
    """
    check = Check("no refund paid without an approval for its exact arguments")
    calls = {c["id"]: c for c in rows["agents.ToolCall"]}
    approvals: dict[Any, list[Row]] = defaultdict(list)  # a call asked about again has one request per asking
    for approval in rows["approvals.ApprovalRequest"]:
        approvals[approval["tool_call_id"]].append(approval)
    rules_of = _approval_rules(rows)
    paid = [r for r in rows["agents.Refund"] if r["status"] in MONEY_MOVED_STATUSES or r["provider_refund_id"]]
    for refund in paid:
        call = calls.get(refund["tool_call_id"], {})
        always, limit, currency = rules_of(call)
        needed = (
            call.get("approval_required")
            or call.get("name") in always
            or (limit is not None and refund["amount_cents"] > limit)
            # A version naming its currency reviews every refund in another (one naming none, from before
            # versions named it, was read in the setting of its time, which the bundle does not carry).
            or (currency is not None and str(refund.get("currency") or "").lower() != currency)
        )
        if not needed:
            continue
        approved = [a for a in approvals.get(refund["tool_call_id"], []) if a["status"] == "approved"]
        if not approved:
            check.violations.append(f"refund {refund['idempotency_key']} was paid with no approved request")
        elif all(a["arguments_digest"] != arguments_digest(call.get("arguments") or {}) for a in approved):
            check.violations.append(f"refund {refund['idempotency_key']}: the approval was for other arguments")
    check.detail = f"{len(paid)} refund(s) that reached the provider"
    return check


def _one_unreviewed_refund_per_order(rows: dict[str, list[Row]]) -> Check:
    """No order was refunded twice without a staff approval. A second refund on one order always asks one
    (``agents.refunds``: whichever refund's intent came second found the other counted, paid, pending or
    still to happen), whatever its amount and its call's flag: of an order's refunds that moved money, one
    at most was paid unreviewed. A refund that failed counts for neither (the second may have been asked
    after it failed, and rightly unreviewed)."""
    check = Check("no order refunded twice without a staff approval")
    calls = {c["id"]: c for c in rows["agents.ToolCall"]}
    approved_digests: dict[Any, set[str]] = defaultdict(set)
    for approval in rows["approvals.ApprovalRequest"]:
        if approval["status"] == "approved":
            approved_digests[approval["tool_call_id"]].add(approval["arguments_digest"])
    numbers = {o["id"]: o.get("number") for o in rows["tickets.Order"]}
    unreviewed: dict[Any, list[str]] = defaultdict(list)
    for refund in rows["agents.Refund"]:
        if refund["status"] not in MONEY_MOVED_STATUSES:
            continue
        call = calls.get(refund["tool_call_id"], {})
        if arguments_digest(call.get("arguments") or {}) not in approved_digests[refund["tool_call_id"]]:
            unreviewed[refund["order_id"]].append(refund["idempotency_key"])
    for order_id, keys in sorted(unreviewed.items(), key=lambda item: str(item[0])):
        if len(keys) > 1:
            check.violations.append(
                f"order {numbers.get(order_id, order_id)} has {len(keys)} refunds paid with no staff approval "
                f"({', '.join(sorted(keys))}): a second refund on one order needs one"
            )
    return check


def _asked_by_its_rules_before_it_runs(rows: dict[str, list[Row]]) -> Check:
    """A call that may still run where the bundle is restored (not final) runs on its own flag: one that
    reads as needing no approval is carried out with none (``agents.approval.may_execute``), whatever its
    amount. So it must read as needing one where the rules it was recorded under ask one (a tool that
    always does, a refund above its version's threshold), as a paid refund is judged
    (``_approved_before_paid``): a $450 refund waiting for staff, edited to read as one recorded to run
    unreviewed, was paid where it was restored, reviewed by nobody."""
    check = Check("no call still to run reads as needing no approval its rules ask")
    rules_of, order_currency, asked_before = (
        _approval_rules(rows),
        _order_currency(rows),
        _asked_before_on_its_order(rows),
    )
    over_the_limit = _over_the_customers_limit(rows)
    waiting = [c for c in rows["agents.ToolCall"] if c.get("status") not in FINAL_CALL_STATUSES]
    for call in waiting:
        if call.get("approval_required"):
            continue  # it runs only with an approved request for its arguments (``_approvals_given_by_staff``)
        always, limit, currency = rules_of(call)
        # Where it is restored, a version naming no currency is read in this deployment's.
        currency = currency or settings.APPROVAL_POLICY_CURRENCY
        amount = (call.get("arguments") or {}).get("amount_cents") if isinstance(call.get("arguments"), dict) else None
        refund = call.get("name") == REFUND_TOOL
        over = (
            refund and limit is not None and isinstance(amount, int) and not isinstance(amount, bool) and amount > limit
        )
        paid_in = order_currency(call) if refund else None
        other = paid_in is not None and paid_in != currency
        before = (asked_before(call) or over_the_limit(call)) if refund else None
        if call.get("name") in always or over or other or before:
            if call.get("name") in always:
                why = f"every {call.get('name')} call needs one"
            elif over:
                why = f"{amount} cents is above its threshold of {limit}"
            elif other:
                why = f"its order is in {str(paid_in).upper()}, its rules' amounts in {currency.upper()}"
            else:
                why = str(before)
            check.violations.append(
                f"tool call {call['id']} ({call.get('name')}, {call.get('status')}) may still run and reads as "
                f"needing no approval, though its rules ask one ({why})"
            )
    check.detail = f"{len(waiting)} call(s) still to run"
    return check


def _asked_before_on_its_order(rows: dict[str, list[Row]]) -> Callable[[Row], str | None]:
    """Why a refund call needs an approval for what was asked on its order before it, read in the bundle
    (the rules of ``agents.refunds.refund_approval_reason`` that count other refunds), or None: a refund on
    the order asked for before it, done or still to come (a second refund on one order); or one staff
    declined, or a person stopped, before it. Its order is its customer's of that number, as numbers are
    compared. Judged on what each earlier call is now, which tells what it was when this one was asked: a
    call still to come, or one whose refund counts, was still to come then, or done; one declined or
    stopped was waiting then, or stopped. One ended unpaid otherwise (the customer cancelled it) may have
    ended before this one was asked, and is not held against it."""
    customer_of = {t["id"]: t.get("customer_id") for t in rows["tickets.Ticket"]}
    runs = {r["id"]: r for r in rows["agents.AgentRun"]}
    refund_of = {r["tool_call_id"]: r for r in rows["agents.Refund"]}
    refund_calls = [c for c in rows["agents.ToolCall"] if c.get("name") == REFUND_TOOL]

    def order_of(call: Row) -> tuple[Any, str]:
        arguments = call.get("arguments") if isinstance(call.get("arguments"), dict) else {}
        return customer_of.get(call.get("ticket_id")), str(arguments.get("order_number") or "").strip().upper()

    def asked_before(call: Row) -> str | None:
        here, asked = order_of(call), _asked_at(call)
        for earlier in refund_calls:
            if asked is None or earlier.get("id") == call.get("id") or order_of(earlier) != here:
                continue
            if (before := _asked_at(earlier)) is None or not before < asked:
                continue
            number, run = here[1], runs.get(earlier.get("run_id")) or {}
            if earlier.get("approval_decision") == "rejected" or _stopped_by_a_person(earlier, run):
                return f"a refund on order {number} was declined or stopped before it (tool call {earlier['id']})"
            refund = refund_of.get(earlier["id"])
            if (refund is not None and refund.get("status") in RESERVING_REFUND_STATUSES) or (
                refund is None and _still_to_come(earlier, run)
            ):
                return f"a second refund on order {number} (tool call {earlier['id']} asked for one before it)"
        return None

    return asked_before


def _over_the_customers_limit(rows: dict[str, list[Row]]) -> Callable[[Row], str | None]:
    """Why a refund call needs an approval for the customer's refunds in its rules' window (the per-customer
    limit of ``agents.refunds.refund_approval_reason``), read in the bundle, or None. Counted as they stood
    when it was asked: refunds of the customer's calls asked before it, in its rules' currency, made in the
    window before it (or after it: then still to come when it was asked), and their calls still to come
    asked in that window. A refund failed since is not counted, nor one in another currency (its own rule),
    so a call is held to no more than it was."""
    policy_of, order_currency = _policy_of(rows), _order_currency(rows)
    customer_of = {t["id"]: t.get("customer_id") for t in rows["tickets.Ticket"]}
    runs = {r["id"]: r for r in rows["agents.AgentRun"]}
    refund_of = {r["tool_call_id"]: r for r in rows["agents.Refund"]}
    refund_calls = [c for c in rows["agents.ToolCall"] if c.get("name") == REFUND_TOOL]

    def over(call: Row) -> str | None:
        _, policy = policy_of(call)
        limit, days = policy.get("customer_limit_cents"), policy.get("customer_window_days")
        limit = policy.get("refund_threshold_cents") if limit is None else limit
        currency = str(policy.get("currency") or settings.APPROVAL_POLICY_CURRENCY).lower()
        amount, asked = _amount_of(call), _asked_at(call)
        if not isinstance(limit, int) or not isinstance(days, int) or amount is None or asked is None:
            return None
        since = asked[0] - dt.timedelta(days=days)
        recent = 0
        for earlier in refund_calls:
            at = _asked_at(earlier)
            if (
                at is None
                or not at < asked
                or customer_of.get(earlier.get("ticket_id")) != customer_of.get(call.get("ticket_id"))
            ):
                continue
            if order_currency(earlier) != currency:
                continue
            refund, run = refund_of.get(earlier["id"]), runs.get(earlier.get("run_id")) or {}
            if refund is not None:
                made = _moment(refund.get("created_at"))
                if refund.get("status") in RESERVING_REFUND_STATUSES and made is not None and made >= since:
                    recent += _amount_of(refund, "amount_cents") or 0
            elif _still_to_come(earlier, run) and at[0] >= since:
                recent += _amount_of(earlier) or 0
        if recent + amount <= limit:
            return None
        return (
            f"the customer's refunds in the {days} days before it, {format_money(recent, currency)}, and its "
            f"{format_money(amount, currency)} are above the limit of {format_money(limit, currency)}"
        )

    return over


def _amount_of(row: Row, name: str = "") -> int | None:
    """A refund call's amount (its arguments'), or a column's (``name``), when it is a whole number."""
    arguments = row.get("arguments") if isinstance(row.get("arguments"), dict) else {}
    value = row.get(name) if name else arguments.get("amount_cents")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _still_to_come(call: Row, run: Row) -> bool:
    """A refund call with no refund row yet whose refund may still happen (``refund_calls_still_to_happen``)."""
    return call.get("status") not in FINAL_CALL_STATUSES and run.get("status") in ACTIVE_RUN_STATUSES


def _moment(value: Any) -> dt.datetime | None:
    """A time as a row carries it (a datetime, or its ISO text), or None when it is none."""
    if isinstance(value, dt.datetime):
        return value
    try:
        return parse_datetime(str(value or ""))
    except ValueError:  # well formed, but no time there is (reported by the rows' own checks)
        return None


def _asked_at(call: Row) -> tuple[dt.datetime, Any] | None:
    """When a call was asked for (its intent), and its id for calls asked at the same moment."""
    moment = _moment(call.get("started_at"))
    return None if moment is None else (moment, call.get("id"))


def _stopped_by_a_person(call: Row, run: Row) -> bool:
    """A refund call its run left unpaid because a person took the ticket (``agents.refunds._stopped_before``):
    not one the customer cancelled, or let expire, first."""
    theirs = call.get("confirmation_decision") in {ConfirmationDecision.CANCELLED, ConfirmationDecision.EXPIRED}
    return (
        run.get("outcome") == PERSON_TOOK_OVER
        and PERSON_TOOK_OVER in str(call.get("error") or "")
        and call.get("status") != CallStatus.SUCCEEDED
        and not theirs
    )


def _approvals_given_by_staff(rows: dict[str, list[Row]]) -> Check:
    """A call that reads approved was approved by a member of staff: its request approved for the digest
    the call carries, decided by a person the bundle names, on its ticket's timeline. A call still to
    run pays on that reading alone (``agents.approval.may_execute``): one edited to read approved, its
    request left waiting, would be paid where it is restored, though no refund of the bundle had yet
    reached the provider for the other checks to see."""
    check = Check("no call carries an approval staff did not give")
    requests: dict[Any, list[Row]] = defaultdict(list)
    for approval in rows["approvals.ApprovalRequest"]:
        requests[approval["tool_call_id"]].append(approval)
    decided = {
        (e["ticket_id"], e["payload"].get("approval_id"), e.get("actor_user"))
        for e in rows["tickets.TicketEvent"]
        if e.get("kind") == "approval_decided"
        and isinstance(e.get("payload"), dict)
        and e["payload"].get("decision") == "approved"
    }
    calls = [c for c in rows["agents.ToolCall"] if c.get("approval_decision") == "approved"]
    for call in calls:
        given = [
            a
            for a in requests.get(call["id"], [])
            if a["status"] == "approved"
            and a["arguments_digest"] == call.get("approval_digest")
            and a.get("decided_by") is not None
            and (a["ticket_id"], a["id"], a["decided_by"]) in decided
        ]
        if not given:
            check.violations.append(
                f"tool call {call['id']} ({call['name']}) reads approved, but no member of staff approved "
                "a request for its arguments"
            )
    check.detail = f"{len(calls)} call(s) approved"
    return check


def _confirmations_given_by_customers(rows: dict[str, list[Row]]) -> Check:
    """A call that reads confirmed was confirmed by its customer: their Confirm is on its ticket's
    timeline. A call still to run pays on that reading (``agents.confirmation.confirmed``): one edited
    to read confirmed would be paid where it is restored, without the customer's Confirm."""
    check = Check("no call carries a confirmation its customer did not give")
    pressed = {
        (e["ticket_id"], e["payload"].get("call_id"))
        for e in rows["tickets.TicketEvent"]
        if e.get("kind") == "confirmation_decided"
        and e.get("actor_kind") == ActorKind.CUSTOMER
        and isinstance(e.get("payload"), dict)
        and e["payload"].get("decision") == ConfirmationDecision.CONFIRMED
    }
    calls = [c for c in rows["agents.ToolCall"] if c.get("confirmation_decision") == ConfirmationDecision.CONFIRMED]
    for call in calls:
        if (call["ticket_id"], call["id"]) not in pressed:
            check.violations.append(
                f"tool call {call['id']} ({call['name']}) reads confirmed, but its customer's Confirm is not "
                "on its ticket's timeline"
            )
    check.detail = f"{len(calls)} call(s) confirmed"
    return check


def _asked_to_confirm_before_it_runs(rows: dict[str, list[Row]], settings_in_force: dict[str, Any] | None) -> Check:
    """A refund recorded to run (``started``) that reads as never asked of its customer runs without their
    Confirm where the bundle is restored (``agents.confirmation.confirmed``: no question, nothing to
    answer). Where the bundle was written the customer's Confirm was on (``settings_in_force``, the
    manifest's ``REFUND_CUSTOMER_CONFIRMATION``) and the rules the call was recorded under ask it (its
    version's ``customer_confirms_refunds``), such a call was asked, with its intent or after its
    approval: one that reads otherwise was edited (a question waiting for the customer, turned into a
    refund recorded to run, was paid where it was restored without their Confirm)."""
    check = Check("no refund still to run skips the customer's Confirm its rules ask")
    if not (settings_in_force or {}).get("REFUND_CUSTOMER_CONFIRMATION"):
        check.detail = "the customer's Confirm was off where the bundle was written (or it does not say)"
        return check
    policy_of = _policy_of(rows)
    started = [c for c in rows["agents.ToolCall"] if c.get("name") == REFUND_TOOL and c.get("status") == "started"]
    for call in started:
        if call.get("confirmation_required") or not policy_of(call)[1].get("customer_confirms_refunds"):
            continue
        check.violations.append(
            f"tool call {call['id']} ({REFUND_TOOL}) is recorded to run and reads as never asked of its "
            "customer, though the rules it was recorded under ask their Confirm"
        )
    check.detail = f"{len(started)} refund(s) recorded to run"
    return check


def _gapless(rows: dict[str, list[Row]]) -> Check:
    check = Check("gapless timeline on every ticket")
    seqs: dict[int, list[int]] = defaultdict(list)
    for event in rows["tickets.TicketEvent"]:
        seqs[event["ticket_id"]].append(event["seq"])
    last = {}
    for ticket in rows["tickets.Ticket"]:
        got = sorted(seqs.get(ticket["id"], []))
        last[ticket["id"]] = ticket["last_event_seq"]
        if got != list(range(1, len(got) + 1)) or len(got) != ticket["last_event_seq"]:
            check.violations.append(
                f"ticket #{ticket['id']}: events {got[:8]}..., last number {ticket['last_event_seq']}"
            )
    # A step read its conversation at a number of the timeline that existed (a later one would hide
    # every person's reply after it from the checks on what the step says).
    for step in rows["agents.ModelStep"]:
        read = step.get("read_seq")
        if read is not None and step.get("ticket_id") in last and read > last[step["ticket_id"]]:
            check.violations.append(f"step {step['id']}: read at number {read}, after its ticket's last")
    check.detail = f"{len(rows['tickets.TicketEvent'])} event(s) on {len(rows['tickets.Ticket'])} ticket(s)"
    return check


def profile_versions(rows: dict[str, list[Row]]) -> str:
    """The agent profile versions the runs used (a run pins the version it started with)."""
    versions = {p["id"]: p["version"] for p in rows.get("agents.AgentProfile", [])}
    used = Counter(versions.get(r.get("profile_id"), "none") for r in rows.get("agents.AgentRun", []))
    if not used:
        return "none (no runs)"
    return ", ".join(f"v{version}: {n} run(s)" for version, n in sorted(used.items(), key=lambda i: str(i[0])))


def _identity(rows: dict[str, list[Row]], manifest: dict) -> list[str]:
    tickets = rows["tickets.Ticket"]
    customers = rows["tickets.Customer"]
    selection = manifest["selection"]
    chosen = "every ticket" if selection["all"] else "tickets " + ", ".join(f"#{pk}" for pk in selection["tickets"])
    carried = selection.get("carried_for_refunds") or []
    return [
        f"selection: {chosen}{' (open only)' if selection['open_only'] else ''}",
        *([f"carried for the refunds on the same orders: {', '.join(f'#{pk}' for pk in carried)}"] if carried else []),
        f"tickets: {len(tickets)}: " + ", ".join(f"#{t['id']} {t['status']}" for t in tickets),
        f"customers: {len(customers)}: " + ", ".join(f"{c['id']} <{c['email']}> login {c['user']}" for c in customers),
        f"users carried by name: {len(rows[USERS_LABEL])}: " + ", ".join(map(_user_with_rights, rows[USERS_LABEL])),
        f"agent profile versions: {profile_versions(rows)}",
        *_withheld_parameters(rows),
    ]


def _withheld_parameters(rows: dict[str, list[Row]]) -> list[str]:
    """The model parameters whose values the bundle does not carry, which a restore asks for."""
    withheld = {p["version"]: withheld_model_parameters(p.get("model_parameters")) for p in rows["agents.AgentProfile"]}
    said = "; ".join(f"v{version}: {', '.join(names)}" for version, names in sorted(withheld.items()) if names)
    return [f"model parameters carried without their values (restore asks for them): {said}"] if said else []


def policy_currency(profile: Any) -> str:
    """The currency of a version's policy amounts (a bundle's row or manifest): the one it names; one naming
    none is read in this deployment's (``agents.profiles.policy_values``)."""
    policy = profile.get("approval_policy") if isinstance(profile, dict) else None
    named = policy.get("currency") if isinstance(policy, dict) else None
    return named.lower() if isinstance(named, str) and named else settings.APPROVAL_POLICY_CURRENCY


def active_profile_rules(active: Any) -> str:
    """The money rules of the manifest's active agent profile version, which a deployment with none
    makes active when the bundle is restored: its threshold and the tools that always need an approval."""
    if not isinstance(active, dict):
        return "none"
    policy = active.get("approval_policy") if isinstance(active.get("approval_policy"), dict) else {}
    threshold = policy.get("refund_threshold_cents")
    tools = active.get("tools") if isinstance(active.get("tools"), list) else []
    always = sorted(str(t.get("name")) for t in tools if isinstance(t, dict) and t.get("requires_approval"))
    above = format_money(threshold, policy_currency(active)) if isinstance(threshold, int) else "the default threshold"
    return (
        f"version {active.get('version')!r}: refunds above {above} per order need an approval; tools that always "
        f"need one: {', '.join(always) or 'none'}"
    )


def rights_alarm(users: list[Row], profiles: list[Row], manifest: dict[str, Any]) -> list[str]:
    """What an unauthenticated bundle's users would be given: anyone who could hand the operator the
    file could have written them (a superuser, a member of staff who decides approvals)."""
    granted = [f"  {user['username']}: {', '.join(rights)}" for user in users if (rights := user_rights(user))]
    lines = (
        [
            "Anyone who could hand you this file could have written it. Restored, it would create these logins "
            "with these rights (a login of the same name already here keeps its own):",
            *granted,
        ]
        if granted
        else ["Restored, it would give no login any right (staff status, group, permission or superuser)."]
    )
    # Restored where none is active, a bundled version that was active stays so; else the manifest's is made so.
    active = next((p for p in profiles if p.get("is_active")), manifest.get("active_profile"))
    if active is not None:
        lines.append(
            "Restored where no agent profile version is active, it would make its own active, and new runs "
            f"would follow its prompt, tools and rules: {active_profile_rules(active)}."
        )
    return lines


def _user_with_rights(user: Row) -> str:
    """A carried user and the rights restore gives the login it creates: what a forged bundle would grant
    is read before it is restored."""
    rights = user_rights(user)
    return f"{user['username']} ({', '.join(rights)})" if rights else user["username"]


def _knowledge(rows: dict[str, list[Row]]) -> list[str]:
    messages = rows["tickets.Message"]
    kinds = Counter(m["author_kind"] for m in messages)
    internal = sum(1 for m in messages if not m["is_public"])
    referenced: set[str] = set()
    for call in rows["agents.ToolCall"]:
        if call["name"] == "search_help" and isinstance(call["result"], dict):
            referenced |= {a.get("slug") for a in call["result"].get("articles", []) if isinstance(a, dict)}
    carried = {a["slug"] for a in rows["tickets.HelpArticle"]}
    articles = ", ".join(f"{s}{'' if s in carried else ' (NOT carried)'}" for s in sorted(referenced, key=str))
    return [
        f"messages: {len(messages)} ("
        + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        + f"; internal {internal})",
        f"attachments: {len(rows['tickets.Attachment'])} (their files are not in the bundle)",
        f"timeline events: {len(rows['tickets.TicketEvent'])}",
        f"help articles referenced by search_help: {articles or 'none'}",
    ]


def _permissions(rows: dict[str, list[Row]], manifest: dict) -> list[str]:
    lines = []
    rules = {r["tool_name"]: r["requires_approval"] for r in rows["agents.ToolApprovalRule"]}
    for name, tool in manifest["tools"].items():
        approval = "always needs an approval (rule)" if rules.get(name) else (
            "approval by policy" if tool["policy_may_ask_approval"] else "no approval"
        )  # fmt: skip
        lines.append(f"tool {name}: replay {tool['replay_policy']}, {approval}")
    for name in sorted(set(rules) - set(manifest["tools"])):
        lines.append(f"rule for unknown tool {name}: {'approval' if rules[name] else 'no approval'}")
    # The tables follow the active version: their amounts are in its currency.
    currency = policy_currency(
        next((p for p in rows.get("agents.AgentProfile", []) if p.get("is_active")), manifest.get("active_profile"))
    )
    for policy in rows["agents.ApprovalPolicy"]:
        limit = policy["customer_limit_cents"]
        lines.append(
            f"approval policy: refunds above {format_money(policy['refund_threshold_cents'], currency)} per order; "
            f"per customer {format_money(limit, currency) if limit is not None else 'the same'} in "
            f"{policy['customer_window_days']} days; requests expire after {policy['ttl_hours']} h; "
            f"customer confirms: {policy['customer_confirms_refunds']}"
        )
    if not rows["agents.ApprovalPolicy"]:
        lines.append("approval policy: the defaults (no policy row was saved)")
    flagged = [c["id"] for c in rows["tickets.Customer"] if c["requires_refund_approval"]]
    lines.append(f"customers with every refund reviewed: {flagged or 'none'}")
    lines.append("settings: " + ", ".join(f"{k}={v}" for k, v in manifest["settings"].items()))
    secrets = manifest["secrets"]
    lines.append("secrets (names only, never values): " + ", ".join(secrets["not_included"]))
    if secrets["withheld_from_rows"]:
        lines.append(f"secret values found in rows and withheld: {secrets['withheld_from_rows']}")
    return lines


def _activity(rows: dict[str, list[Row]]) -> list[str]:
    runs = Counter(r["status"] for r in rows["agents.AgentRun"])
    calls = Counter((c["name"], c["status"]) for c in rows["agents.ToolCall"])
    tokens = sum(s["prompt_tokens"] + s["completion_tokens"] for s in rows["agents.ModelStep"])
    lines = [
        f"runs: {sum(runs.values())} (" + ", ".join(f"{k} {n}" for k, n in sorted(runs.items())) + ")",
        f"model steps: {len(rows['agents.ModelStep'])}, {tokens} tokens",
        f"tool calls: {sum(calls.values())} ("
        + ", ".join(f"{name} {status} {n}" for (name, status), n in sorted(calls.items()))
        + ")",
    ]
    for refund in rows["agents.Refund"]:
        lines.append(
            f"refund {refund['idempotency_key']}: {format_money(refund['amount_cents'], refund['currency'])} "
            f"{refund['status']} (provider {refund['provider_refund_id'] or 'none yet'})"
        )
    pending = [a for a in rows["approvals.ApprovalRequest"] if a["status"] == "pending"]
    lines.append(f"pending approvals: {len(pending)}")
    for approval in pending:
        amount = format_money(approval["amount_cents"], approval["currency"]) if approval["amount_cents"] else ""
        lines.append(
            f"  approval {approval['id']} on #{approval['ticket_id']}: {approval['tool_name']} {amount} "
            f"(arguments {approval['arguments_digest'][:12]}…), expires {approval['expires_at']}"
        )
    return lines
