"""What a state bundle holds: the one declared, ordered list of its parts.

A part is one table and how its rows are chosen from the selected tickets. Restore
inserts the parts in this order; verify reads them back by name. Adding a table to
the bundle is adding a ``Part`` here (``tests/state/test_parts.py`` fails while a
bundled row points at a table that is not in the bundle).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from django.apps import apps
from django.conf import settings
from django.db.models import Model, QuerySet

from agents.profiles import policy_with_currency

# The tool whose calls ask for a customer's money back (agents.refunds registers it).
REFUND_TOOL = "issue_refund"


@dataclass(frozen=True)
class Selection:
    """The tickets a bundle is about: ``ticket_ids``, those chosen. Every part's rows are chosen
    from ``bundled_ticket_ids``, the chosen ones and the tickets that hold their orders' refunds."""

    ticket_ids: tuple[int, ...]

    @cached_property
    def bundled_ticket_ids(self) -> tuple[int, ...]:
        """The chosen tickets, and every ticket of their customers in which a refund was asked for, paid
        or declined. Read once per selection: every part is chosen from the same tickets.

        What an order can still refund counts every refund on it, in any ticket; whether a refund needs
        an approval counts the customer's refunds and refund calls, and staff's declines, in any ticket
        (``agents.refunds``). A refund row belongs to its ticket and call, so the tickets that hold them
        come with the chosen ones: a restored order never refunds again what was paid on it before.
        """
        tickets = apps.get_model("tickets.Ticket").objects
        refunds = apps.get_model("agents.Refund").objects
        calls = apps.get_model("agents.ToolCall").objects
        bundled = set(self.ticket_ids)
        while True:  # a refund's ticket is its order's customer's, so this ends after one more round
            customers = tickets.filter(pk__in=bundled).values("customer_id")
            more = set(refunds.filter(order__customer__in=customers).values_list("ticket_id", flat=True))
            more |= set(
                calls.filter(name=REFUND_TOOL, ticket__customer__in=customers).values_list("ticket_id", flat=True)
            )
            if more <= bundled:
                return tuple(sorted(bundled))
            bundled |= more

    @property
    def carried_for_refunds(self) -> tuple[int, ...]:
        """The tickets bundled, not chosen, for the refunds they hold."""
        chosen = set(self.ticket_ids)
        return tuple(pk for pk in self.bundled_ticket_ids if pk not in chosen)


Select = Callable[[Selection], QuerySet]


@dataclass(frozen=True)
class Part:
    """One table of the bundle.

    ``shared``: rows that other tickets, or the deployment a bundle is restored into, may
    hold too (a customer, an order, the policy). On restore an identical row already there
    is the same row, not a conflict. Other rows belong to one ticket, named by
    ``ticket_column`` (or through the ``via`` part's row, for a row that hangs off a message).
    ``identity``: a shared row that differs from the one already in the database is someone or
    something else under the same key (a customer, an order): never resolved by keeping either.
    ``personal``: rows that may carry a customer's personal data, pseudonymised on export
    unless asked otherwise (``state.pseudonyms``). ``immutable``: rows never changed once
    written, so a database that differs from the bundle on one of them has been altered.
    """

    label: str
    select: Select
    shared: bool = False
    ticket_column: str | None = None
    via: tuple[str, str] | None = None  # (part label, column): the ticket is that row's
    personal: bool = True
    immutable: bool = False
    identity: bool = False  # shared rows naming someone or something: one that differs is another one
    # Columns of an ``immutable`` row that the deployment may still change (which profile version
    # is active): ignored when rows are compared.
    mutable: tuple[str, ...] = ()
    # Columns that record when, by whom or why a row was written, not what it is (a profile version
    # seeded by every fresh deployment on its first use, at its own time): ignored when rows are compared.
    bookkeeping: tuple[str, ...] = ()
    # Columns of a row that otherwise moves on (a call's status, a message's handling) that are written
    # once and never changed (what the customer wrote, a call's key and arguments, a refund's amount): a
    # database that differs from the bundle in one of them has been altered.
    frozen: tuple[str, ...] = ()
    # Columns that move one way only, away from the value a row is written with (column, that value): a
    # call that needs a staff approval never goes back to needing none. A database holding the first value
    # where the bundle holds another has been altered.
    settled: tuple[tuple[str, Any], ...] = ()
    # A row as this release reads it, for comparing: a value an older release left out, filled in as it is
    # read here (a profile version's policy naming no currency is read in this deployment's).
    as_read: Callable[[dict], dict] | None = None

    def altered(self, here: dict, bundled: dict) -> list[str]:
        """The columns in which a row here differs from the bundled one that are never changed once written."""
        differing = self.differing(here, bundled)
        if self.immutable:
            return differing
        first = dict(self.settled)
        return [k for k in differing if k in self.frozen or (k in first and bundled.get(k) != first[k])]

    def differing(self, here: dict, bundled: dict) -> list[str]:
        """The columns in which two rows under one key differ, but for those the deployment may change
        and its bookkeeping."""
        ignored = {*self.mutable, *self.bookkeeping}
        if self.as_read is not None:
            here, bundled = self.as_read(here), self.as_read(bundled)
        return sorted(k for k in here.keys() | bundled.keys() if k not in ignored and here.get(k) != bundled.get(k))

    def same(self, here: dict, bundled: dict) -> bool:
        """The same row, but for the columns the deployment may change and its bookkeeping."""
        return not self.differing(here, bundled)

    @cached_property
    def model(self) -> type[Model]:
        return apps.get_model(self.label)

    @property
    def file(self) -> str:
        return f"parts/{self.label}.jsonl"


def _of_tickets(label: str, column: str = "ticket_id") -> Select:
    return lambda sel: apps.get_model(label).objects.filter(**{f"{column}__in": sel.bundled_ticket_ids})


def _customers(sel: Selection) -> QuerySet:
    return apps.get_model("tickets.Customer").objects.filter(tickets__in=sel.bundled_ticket_ids).distinct()


# The agent's tools see every order of the ticket's customer (list_orders), so a resumed
# ticket needs all of them, not only those its calls named so far.
def _orders(sel: Selection) -> QuerySet:
    return apps.get_model("tickets.Order").objects.filter(customer__tickets__in=sel.bundled_ticket_ids).distinct()


def _order_lines(sel: Selection) -> QuerySet:
    return (
        apps.get_model("tickets.OrderLine")
        .objects.filter(order__customer__tickets__in=sel.bundled_ticket_ids)
        .distinct()
    )


def _help_articles(sel: Selection) -> QuerySet:
    """The articles the agent's ``search_help`` calls on these tickets returned (the knowledge it used)."""
    calls = apps.get_model("agents.ToolCall").objects.filter(ticket_id__in=sel.bundled_ticket_ids, name="search_help")
    slugs: set[str] = set()
    for result in calls.exclude(result=None).values_list("result", flat=True):
        articles = result.get("articles") if isinstance(result, dict) else None
        for article in articles or []:
            if isinstance(article, dict) and isinstance(article.get("slug"), str):
                slugs.add(article["slug"])
    return apps.get_model("tickets.HelpArticle").objects.filter(slug__in=sorted(slugs))


def _profiles(sel: Selection) -> QuerySet:
    """The agent profile versions the bundled tickets' runs are pinned to (they resume on them)."""
    runs = apps.get_model("agents.AgentRun").objects.filter(ticket_id__in=sel.bundled_ticket_ids, profile__isnull=False)
    return apps.get_model("agents.AgentProfile").objects.filter(pk__in=runs.values("profile_id"))


def _every_row(label: str) -> Select:
    return lambda sel: apps.get_model(label).objects.all()


# In insertion order: a row comes after the rows it points at (except a step's earlier
# step, which the same transaction holds; foreign keys are checked at commit).
PARTS: list[Part] = [
    # The customers' and their orders: shared with other tickets of the same customer.
    Part("tickets.Customer", _customers, shared=True, identity=True),
    Part("tickets.Order", _orders, shared=True, identity=True, personal=False),
    Part("tickets.OrderLine", _order_lines, shared=True, identity=True, personal=False),
    # Knowledge and permissions in force: the help articles used, the approval policy and rules.
    Part("tickets.HelpArticle", _help_articles, shared=True, personal=False),
    Part("agents.ApprovalPolicy", _every_row("agents.ApprovalPolicy"), shared=True, personal=False),
    Part("agents.ToolApprovalRule", _every_row("agents.ToolApprovalRule"), shared=True, personal=False),
    # The profile versions the runs use: never changed once written, so one whose content (prompt,
    # model, tools, approval policy) differs under the same key in the target database is another
    # version (refused, not merged). Every deployment writes version 1 itself on first use, at its
    # own time: the same content is the same version, whenever and by whomever it was recorded.
    Part(
        "agents.AgentProfile",
        _profiles,
        shared=True,
        identity=True,
        immutable=True,
        personal=False,
        mutable=("is_active",),
        bookkeeping=("created_at", "created_by", "note"),
        as_read=lambda row: {**row, "approval_policy": policy_with_currency(row.get("approval_policy"))},
    ),  # fmt: skip
    # The ticket ledger.
    Part("tickets.Ticket", _of_tickets("tickets.Ticket", "id"), ticket_column="id"),
    Part(
        "tickets.Message",
        _of_tickets("tickets.Message"),
        ticket_column="ticket_id",
        frozen=("ticket_id", "author_kind", "author_user", "body", "is_public", "client_msg_id", "created_at"),
    ),
    Part(
        "tickets.Attachment",
        _of_tickets("tickets.Attachment", "message__ticket_id"),
        via=("tickets.Message", "message_id"),
        immutable=True,
    ),
    Part("tickets.TicketRating", _of_tickets("tickets.TicketRating"), ticket_column="ticket_id"),
    Part("tickets.TicketEvent", _of_tickets("tickets.TicketEvent"), ticket_column="ticket_id", immutable=True),
    Part("agents.TicketLease", _of_tickets("agents.TicketLease"), ticket_column="ticket_id", personal=False),
    Part("agents.AgentRun", _of_tickets("agents.AgentRun"), ticket_column="ticket_id"),
    Part("agents.ModelStep", _of_tickets("agents.ModelStep"), ticket_column="ticket_id"),
    Part(
        "agents.ToolCall",
        _of_tickets("agents.ToolCall"),
        ticket_column="ticket_id",
        # Its replay policy is recorded with its intent and read by recovery from the row: never changed.
        frozen=(
            "ticket_id",
            "run_id",
            "step_id",
            "index",
            "model_call_id",
            "name",
            "arguments",
            "idempotency_key",
            "replay_policy",
        ),
        settled=(("approval_required", False),),
    ),
    Part(
        "agents.Refund",
        _of_tickets("agents.Refund"),
        ticket_column="ticket_id",
        frozen=("ticket_id", "order_id", "tool_call_id", "idempotency_key", "amount_cents", "currency"),
    ),
    Part("approvals.ApprovalRequest", _of_tickets("approvals.ApprovalRequest"), ticket_column="ticket_id"),
]

# Users are carried by username, not id: a staff member or a customer's login is matched to
# the account of the same name where the bundle is restored, or created there without a
# password. Only what restore needs is carried (no names, emails or password hashes).
USERS_FILE = "parts/auth.User.jsonl"
USERS_LABEL = "auth.User"


def part_named(label: str) -> Part:
    for part in PARTS:
        if part.label == label:
            return part
    raise KeyError(label)


def is_user_model(model: type[Model] | str | None) -> bool:
    if model is None:
        return False
    if isinstance(model, str):
        return model.lower() == settings.AUTH_USER_MODEL.lower()
    return model._meta.label_lower == settings.AUTH_USER_MODEL.lower()


def missing_parts(labels: Iterable[str]) -> list[str]:
    """The parts a bundle with these labels lacks. Every part, even an empty one, is listed by the
    export: a bundle without one was cut (its refunds left out, say), and would read as a ticket
    with none of them."""
    present = set(labels)
    return [label for label in [USERS_LABEL, *(p.label for p in PARTS)] if label not in present]
