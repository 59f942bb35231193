"""The tool registry: what the agent may do, with schemas and replay policies.

Every tool declares how recovery treats a call found ``started`` with no
outcome (DESIGN.md, invariant 5):

- ``safe``: a read; run it again.
- ``keyed``: its effect is deduplicated by the call's idempotency key; reconcile
  first (the ``reconcile`` hook asks what happened under the key), then finish
  or retry with the same key.
- ``never``: no way to deduplicate; mark it uncertain and tell the model.
"""

from __future__ import annotations

import contextlib
import json
import smtplib
import socket
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import jsonschema
import jsonschema.protocols
import jsonschema.validators
from django.contrib.postgres.search import SearchQuery, SearchRank
from django.core.exceptions import ValidationError
from django.core.mail import BadHeaderError, send_mail
from django.db import transaction
from django.db.models import F, Q

from agents.models import AgentRun, ApprovalDecision, CallStatus, ReplayPolicy, ToolCall
from agents.selectors import (
    failed_unseen_cents,
    failed_unseen_total_sql,
    orders_with_refunded_total,
    person_answered_after_step_read,
    person_took_the_ticket_since,
    refunded_total_cents,
    refunded_total_from,
    refunded_total_sql,
)
from support import reads, rows
from tickets import services as ticket_services
from tickets.models import AGENT_STAYS_OUT, ActorKind, AuthorKind, HelpArticle, Message, Order, Ticket, TicketStatus
from tickets.money import format_money
from tickets.selectors import order_lines_sql


class ToolError(Exception):
    """A refusal or failure the model should see and explain (not a crash)."""


class ToolUncertain(ToolError):
    """The effect may or may not have happened; reconciliation will settle it."""


class ToolEscalation(ToolError):
    """The effect failed, or stayed unknown, in a way the model must not explain away.

    The run stops and a person takes the ticket: the customer reads ``customer_text``
    (plain words written for customers), staff read the error. ``uncertain`` says the
    effect may still have happened (the reconciler settles it).

    ``settled``: asked in the transaction that would tell the customer and hand the ticket
    over, with what it escalates locked. Another process (the reconciler) may have learnt
    since that the effect did happen: it returns the call's result then, and nothing is
    escalated; None otherwise.

    ``told``: asked next, in the same transaction: another process (the reconciler) has told the
    customer about this effect already, so the ticket is handed over without their being told twice.
    """

    def __init__(
        self,
        message: str,
        *,
        customer_text: str,
        uncertain: bool = False,
        settled: Callable[[], dict[str, Any] | None] | None = None,
        told: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__(message)
        self.customer_text = customer_text
        self.uncertain = uncertain
        self.settled = settled
        self.told = told


class ToolNeedsApproval(Exception):
    """Raised by an effect before it did anything: a rule that makes this call need a staff approval
    applies since its intent was recorded (staff flagged the customer, or said no to a refund on the
    order, while it waited behind another call). The run pauses on it, as if asked with the intent."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CustomerWroteSince(Exception):
    """Raised by an effect before it did anything: the customer wrote after the call was decided, before
    it was carried out (``agents.selectors.customer_wrote_since_the_go_ahead``). Nothing was written
    or sent; the call ends unrun, and the agent answers the message."""


class ToolStopped(Exception):
    """A person took the ticket before the effect started, or before it was tried again: the run
    ends and the ticket is theirs. ``uncertain``: an earlier attempt may have reached the other
    side (the reconciler settles it)."""

    def __init__(self, message: str, *, uncertain: bool = False) -> None:
        super().__init__(message)
        self.uncertain = uncertain


@dataclass(frozen=True)
class ToolContext:
    """What a tool may touch. The caller holds the ticket's lease.

    Before the intent is recorded (precheck, needs_approval) ``call`` is not saved yet.
    """

    ticket: Ticket
    call: ToolCall
    # The approval policy of the run's profile version (agents.profiles.PolicyValues), where the
    # caller read it; None: read from the run's profile when needed.
    policy: Any = None
    # The caller's lease (agents.lease.Lease) while the effect runs: a tool that commits its own
    # steps before an effect (a refund's intent) fences them with it. None outside the loop.
    lease: Any = None

    @property
    def actor_ref(self) -> str:
        return f"run:{self.call.run_id}"

    @contextlib.contextmanager
    def fenced(self) -> Iterator[None]:
        """A transaction that commits only while the caller still holds the ticket's lease (LeaseLost
        otherwise): a worker that lost the ticket (stopped past its lease, taken over) writes and
        sends nothing, whatever the tool. Outside the loop (no lease), a plain transaction."""
        if self.lease is None:
            with transaction.atomic():
                yield
        else:
            with self.lease.guard():
                yield


Handler = Callable[[ToolContext, dict[str, Any]], dict[str, Any]]
# Returns the call's result if recovery can prove what happened, else None.
Reconciler = Callable[[ToolContext, dict[str, Any]], dict[str, Any] | None]
ApprovalPredicate = Callable[[ToolContext, dict[str, Any]], str | None]
# Raises ToolError when a call can never succeed (checked before any approval is asked).
Precheck = Callable[[ToolContext, dict[str, Any]], None]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    replay_policy: str
    handler: Handler
    reconcile: Reconciler | None = None
    # Returns a reason when this call needs a staff approval before it runs. Asked once,
    # when the call's intent is recorded, in the same transaction (agents.policy).
    needs_approval: ApprovalPredicate | None = None
    # The business rules checked before the intent is recorded and any approval asked;
    # the handler checks them again when it runs.
    precheck: Precheck | None = None
    # The question the customer confirms (or cancels) with a button in the chat before the call
    # runs, after any staff approval, e.g. "Refund $49.99 to the card used for order A-1002?".
    # None: no confirmation. The policy can turn it off (agents.confirmation).
    confirm_question: Callable[[ToolContext, dict[str, Any]], str] | None = None
    # Friendly words for the customer's timeline, e.g. "Looking up your order".
    public_label: str = ""
    # The run ends after this tool succeeds (a hand-off).
    ends_turn: bool = False

    def spec(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


REGISTRY: dict[str, Tool] = {}


def register(tool: Tool) -> Tool:
    REGISTRY[tool.name] = tool
    return tool


def tool_specs(*, enabled: frozenset[str] | None = None) -> list[dict[str, Any]]:
    """The tools the model is offered: every registered one, or those a profile enables."""
    return [tool.spec() for tool in REGISTRY.values() if enabled is None or tool.name in enabled]


_VALIDATORS: dict[str, jsonschema.protocols.Validator] = {}


def _validator(name: str, schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    """One compiled validator per tool: jsonschema.validate would check the schema itself on every call."""
    validator = _VALIDATORS.get(name)
    if validator is None or validator.schema is not schema:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        validator = _VALIDATORS[name] = cls(schema)
    return validator


# Deeper than this, arguments are refused (PostgreSQL's jsonb and the conversation would hold them).
MAX_ARGUMENT_DEPTH = 32


def _depth(value: Any, depth: int = 0) -> int:
    """How deep ``value`` nests, counted up to just past MAX_ARGUMENT_DEPTH."""
    if depth > MAX_ARGUMENT_DEPTH or not isinstance(value, dict | list):
        return depth
    children = value.values() if isinstance(value, dict) else value
    return max((_depth(child, depth + 1) for child in children), default=depth)


def _storable(value: Any, depth: int = 0) -> bool:
    """Can PostgreSQL's jsonb hold this (no NUL, no lone surrogates, not absurdly deep)?"""
    if depth > MAX_ARGUMENT_DEPTH:
        return False
    if isinstance(value, str):
        if "\x00" in value:
            return False
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, dict):
        return all(_storable(k, depth + 1) and _storable(v, depth + 1) for k, v in value.items())
    if isinstance(value, list):
        return all(_storable(v, depth + 1) for v in value)
    return True


def parse_arguments(name: str, raw: str | dict[str, Any]) -> tuple[Tool, dict[str, Any]]:
    """Look up the tool and validate the model's arguments; ToolError on anything wrong."""
    tool = REGISTRY.get(name)
    if tool is None:
        raise ToolError(f"Unknown tool {name!r}. Available tools: {', '.join(sorted(REGISTRY))}.")
    if isinstance(raw, dict):
        args = raw
    else:
        try:
            args = json.loads(raw or "{}")
        except json.JSONDecodeError as exc:
            raise ToolError(f"Arguments for {name} are not valid JSON: {exc.msg}.") from None
        except ValueError:
            # Valid JSON Python will not read: an integer of more than 4300 digits (int_max_str_digits).
            raise ToolError(f"Arguments for {name} hold a number too long to read.") from None
        except RecursionError:
            raise ToolError(f"Arguments for {name} are nested too deeply.") from None
    if not isinstance(args, dict):
        raise ToolError(f"Arguments for {name} must be a JSON object.")
    if _depth(args) > MAX_ARGUMENT_DEPTH:
        raise ToolError(f"Arguments for {name} are nested too deeply.")
    if not _storable(args):
        raise ToolError(f"Arguments for {name} contain NUL characters or invalid Unicode.")
    try:
        _validator(tool.name, tool.parameters).validate(args)
    except jsonschema.ValidationError as exc:
        raise ToolError(f"Invalid arguments for {name}: {exc.message}.") from None
    return tool, args


# --- Orders -------------------------------------------------------------------------


def order_summary(order: Order, *, refunded: int, unseen: int, lines: Iterable[tuple[str, int, int]]) -> dict[str, Any]:
    """The order as the model reads it; ``refunded``: its ``refunded_total_cents``, ``unseen``: its
    ``failed_unseen_cents`` (may still be paid: not refundable again, as the refund's rules count it),
    ``lines``: its lines as (description, quantity, unit price in cents)."""
    refundable = max(0, order.total_cents - refunded - unseen)
    return {
        "order_number": order.number,
        "status": order.status,
        "placed_at": order.placed_at.date().isoformat(),
        "shipped_at": order.shipped_at.date().isoformat() if order.shipped_at else None,
        "delivered_at": order.delivered_at.date().isoformat() if order.delivered_at else None,
        "currency": order.currency,
        "total_cents": order.total_cents,
        "refunded_cents": refunded,
        # Failed without the provider ever showing it, still asked about: it may yet be paid.
        "may_still_be_refunded_cents": unseen,
        "refundable_cents": refundable,
        # Spelled for people, so that a model quotes "$49.99" rather than "4999 cents" or "49.99 USD".
        "total": format_money(order.total_cents, order.currency),
        "refunded": format_money(refunded, order.currency),
        "refundable": format_money(refundable, order.currency),
        "lines": [
            {"description": description, "quantity": quantity, "unit_price_cents": unit_price_cents}
            for description, quantity, unit_price_cents in lines
        ],
    }


def orders_named(customer_id: int, order_number: Any) -> list[Order]:
    """The customer's orders this number names: the one rule for reading an order number a model
    wrote (any case; spaces around it ignored). The order written exactly so, if there is one;
    else every order of the number in another case. Numbers are unique only as written: a customer
    with "a-100" and "A-100" names each by writing it exactly, and "A-100" in any other case names
    both (the caller asks which one rather than choose)."""
    number = str(order_number).strip()
    matches = list(Order.objects.filter(number__iexact=number, customer_id=customer_id).order_by("pk"))
    exact = [order for order in matches if order.number == number]
    return exact or matches


def order_of_customer(customer_id: int, order_number: Any) -> Order | None:
    """The customer's one order of this number, or None (none, or several that differ only in case)."""
    named = orders_named(customer_id, order_number)
    return named[0] if len(named) == 1 else None


def customer_order(ticket: Ticket, order_number: str) -> Order:
    """The order, if it belongs to the ticket's customer. Enforced here, not in the prompt."""
    named = orders_named(ticket.customer_id, order_number)
    if len(named) > 1:
        raise ToolError(
            f"Order number {order_number} names several of this customer's orders "
            f"({', '.join(order.number for order in named)}): ask which one, and give it exactly as written."
        )
    if not named:
        raise ToolError(f"No order {order_number} was found for this customer.")
    return named[0]


def lookup_order(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    order = customer_order(ctx.ticket, args["order_number"])
    rows.flush()  # (what a step holds is written first, as before any read)
    # What was refunded and the lines: one round trip, their SQL kept (no query compiler).
    refunded, unseen, lines = reads.fetch_together(
        [refunded_total_sql(order.pk), failed_unseen_total_sql(order.pk), order_lines_sql(order.pk)]
    )
    return order_summary(order, refunded=refunded_total_from(refunded), unseen=refunded_total_from(unseen), lines=lines)


def list_orders(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    orders = orders_with_refunded_total(Order.objects.filter(customer_id=ctx.ticket.customer_id))
    orders = orders.prefetch_related("lines")[:20]
    return {
        "orders": [
            order_summary(
                order,
                refunded=refunded_total_cents(order),
                unseen=failed_unseen_cents(order),
                lines=[(line.description, line.quantity, line.unit_price_cents) for line in order.lines.all()],
            )
            for order in orders
        ]
    }


def search_help(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    query = SearchQuery(args["query"], search_type="websearch", config="english")
    hits = (
        HelpArticle.objects.filter(search_vector=query)
        .annotate(rank=SearchRank(F("search_vector"), query))
        .order_by("-rank", "title")[:3]
    )
    if not hits:
        # websearch ANDs the words; fall back to any of them.
        words = [w for w in args["query"].split() if w.isalnum()]
        if words:
            query = SearchQuery(" | ".join(words), search_type="raw", config="english")
            hits = (
                HelpArticle.objects.filter(search_vector=query)
                .annotate(rank=SearchRank(F("search_vector"), query))
                .order_by("-rank", "title")[:3]
            )
    return {"articles": [{"slug": a.slug, "title": a.title, "body": a.body} for a in hits]}


# --- Messages -------------------------------------------------------------------------


def _post(ctx: ToolContext, text: str, *, public: bool) -> dict[str, Any]:
    if public and ctx.call.step_id is not None and person_answered_after_step_read(step_id=ctx.call.step_id):
        # Written before a person answered the customer (and handed the ticket back): stale.
        raise ToolError("not posted: a person answered the customer after this was written; read their reply")
    try:
        with ctx.fenced():  # a worker that lost the lease posts nothing (its run may have ended)
            if public:
                # Under the ticket's row lock: a take-over, resolve or close that committed after the
                # call was checked is seen here, and none lands between this check and the message.
                status = ticket_services.ticket_hold(ctx.ticket.pk)
                if status in AGENT_STAYS_OUT or person_took_the_ticket_since(
                    AgentRun(pk=ctx.call.run_id, ticket_id=ctx.ticket.pk)
                ):
                    raise ToolStopped("not posted: a person took the ticket over")
            message, created = ticket_services.message_post(
                ticket=ctx.ticket,
                author_kind=AuthorKind.AGENT,
                body=text,
                is_public=public,
                client_msg_id=message_key(ctx),
                actor_ref=ctx.actor_ref,
            )
    except ValidationError as exc:
        raise ToolError(" ".join(exc.messages)) from None
    return {"message_id": message.pk, "posted": True, "deduplicated": not created}


def message_key(ctx: ToolContext) -> str:
    """The key a tool posts its message under: the call's idempotency key in the product's own
    namespace (a colon), which no client's message ID can take (tickets.services.client_key)."""
    return f"tool:{ctx.call.idempotency_key}"


def _reconcile_post(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any] | None:
    # Under its key, or under the bare idempotency key by the agent (a message posted before keys had
    # their namespace): a customer's message under that key is not the agent's.
    message = (
        Message.objects.filter(ticket=ctx.ticket)
        .filter(
            Q(client_msg_id=message_key(ctx)) | Q(client_msg_id=ctx.call.idempotency_key, author_kind=AuthorKind.AGENT)
        )
        .first()
    )
    if message is None:
        return None
    return {"message_id": message.pk, "posted": True, "deduplicated": True}


def post_reply(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    return _post(ctx, args["text"], public=True)


def add_internal_note(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    return _post(ctx, args["text"], public=False)


def email_may_have_gone_out(ctx: ToolContext, args: dict[str, Any]) -> str | None:
    """Why this email waits for a person: an earlier one on the ticket may have gone out (its call is
    uncertain: the send was cut off, or its worker died, after the mail server may have taken it).
    SMTP cannot deduplicate, and the model, told so, may still ask again: a person checks first, or
    the customer gets it twice. None when no earlier email is in doubt."""
    earlier = ToolCall.objects.filter(
        ticket_id=ctx.ticket.pk, name="notify_customer_by_email", status=CallStatus.UNCERTAIN
    ).order_by("pk")
    if ctx.call.pk is not None:
        earlier = earlier.exclude(pk=ctx.call.pk)
    found = earlier.values_list("pk", "arguments").first()
    if found is None:
        return None
    pk, arguments = found
    subject = str((arguments or {}).get("subject", ""))[:80]
    return (
        f"an earlier email to the customer (call {pk}, {subject!r}) may have gone out: its send was cut off "
        "before the mail server confirmed it; a person checks before another email is sent"
    )


def notify_customer_by_email(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    if ctx.call.step_id is not None and person_answered_after_step_read(step_id=ctx.call.step_id):
        # Written before a person answered the customer (and handed the ticket back): stale words.
        raise ToolError("not sent: a person answered the customer after this was written; read their reply")
    # Checked again next to the send: an earlier email of the same step may have been left uncertain
    # after this call's intent was recorded. Nothing is sent; the run pauses on it for a person.
    late = email_may_have_gone_out(ctx, args)
    if late and ctx.call.approval_decision != ApprovalDecision.APPROVED:
        raise ToolNeedsApproval(late)
    with ctx.fenced():
        pass  # still this worker's ticket (an email cannot be taken back, nor sent twice knowingly)
    customer = ctx.ticket.customer
    try:
        sent = send_mail(args["subject"], args["body"], None, [customer.email], fail_silently=False)
    except NOT_SENT as exc:
        # Certainly not sent: the message was never built, or the mail server refused it (or could not be
        # reached) before taking it. Said so, not "may have gone out": nothing waits for a person.
        raise ToolError(f"not sent (the mail server did not take it): {type(exc).__name__}: {exc}") from None
    return {"sent": bool(sent), "to": customer.email}


# What a send raises when the message certainly did not go out. Anything else (the connection cut or
# silent after the message was handed over) may have delivered it: the call is uncertain.
NOT_SENT = (
    BadHeaderError,  # a header that cannot be written (a line break in the subject): never built
    smtplib.SMTPRecipientsRefused,
    smtplib.SMTPSenderRefused,
    smtplib.SMTPDataError,  # the server answered the message with an error: not taken
    smtplib.SMTPHeloError,
    smtplib.SMTPAuthenticationError,
    smtplib.SMTPNotSupportedError,
    smtplib.SMTPConnectError,
    ConnectionRefusedError,
    socket.gaierror,  # the mail server's name does not resolve
)


def hand_off_to_human(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    # Fenced: a worker that lost the lease (the hand-off done by the one that took over, and the
    # ticket perhaps handed back since) does not give the ticket to a person again.
    with ctx.fenced():
        ticket_services.message_post(
            ticket=ctx.ticket,
            author_kind=AuthorKind.AGENT,
            body=f"Handed off to a person: {args['reason']}",
            is_public=False,
            client_msg_id=message_key(ctx),
            actor_ref=ctx.actor_ref,
        )
        ticket_services.ticket_transition(
            ticket=ctx.ticket,
            to_status=TicketStatus.WITH_HUMAN,
            actor_kind=ActorKind.AGENT,
            actor_ref=ctx.actor_ref,
            reason=args["reason"],
        )
    return {"handed_off": True}


def _reconcile_hand_off(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any] | None:
    ticket = Ticket.objects.get(pk=ctx.ticket.pk)
    if ticket.status == TicketStatus.WITH_HUMAN:
        return {"handed_off": True}
    return None


_ORDER_NUMBER = {"type": "string", "minLength": 1, "maxLength": 32, "description": "The order number, e.g. A-1001"}
_TEXT = {"type": "string", "minLength": 1, "maxLength": 4000}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


register(
    Tool(
        name="lookup_order",
        description="Look up one of the customer's orders by its number: status, dates, lines, refundable amount.",
        parameters=_object({"order_number": _ORDER_NUMBER}, ["order_number"]),
        replay_policy=ReplayPolicy.SAFE,
        handler=lookup_order,
        public_label="Looking up your order",
    )
)
register(
    Tool(
        name="list_orders",
        description="List the customer's recent orders.",
        parameters=_object({}, []),
        replay_policy=ReplayPolicy.SAFE,
        handler=list_orders,
        public_label="Looking up your orders",
    )
)
register(
    Tool(
        name="search_help",
        description="Search the help articles (refund policy, shipping, returns...).",
        parameters=_object({"query": {"type": "string", "minLength": 1, "maxLength": 200}}, ["query"]),
        replay_policy=ReplayPolicy.SAFE,
        handler=search_help,
        public_label="Checking our help articles",
    )
)
register(
    Tool(
        name="post_reply",
        description="Post a reply the customer sees. Use for an interim update; your final answer is posted for you.",
        parameters=_object({"text": _TEXT}, ["text"]),
        replay_policy=ReplayPolicy.KEYED,
        handler=post_reply,
        reconcile=_reconcile_post,
    )
)
register(
    Tool(
        name="add_internal_note",
        description="Add a note for the support staff; the customer does not see it.",
        parameters=_object({"text": _TEXT}, ["text"]),
        replay_policy=ReplayPolicy.KEYED,
        handler=add_internal_note,
        reconcile=_reconcile_post,
    )
)
register(
    Tool(
        name="notify_customer_by_email",
        description="Send the customer an email. Cannot be undone or deduplicated.",
        parameters=_object(
            {"subject": {"type": "string", "minLength": 1, "maxLength": 200}, "body": _TEXT}, ["subject", "body"]
        ),
        replay_policy=ReplayPolicy.NEVER,
        handler=notify_customer_by_email,
        needs_approval=email_may_have_gone_out,
        public_label="Sending you an email",
    )
)
register(
    Tool(
        name="hand_off_to_human",
        description="Hand the ticket to a member of the support staff, with the reason.",
        parameters=_object({"reason": {"type": "string", "minLength": 1, "maxLength": 500}}, ["reason"]),
        replay_policy=ReplayPolicy.KEYED,
        handler=hand_off_to_human,
        reconcile=_reconcile_hand_off,
        public_label="A person from our team will join",
        ends_turn=True,
    )
)
