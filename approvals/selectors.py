"""Reads of approvals: the pending cards as the person deciding reads them, and the history."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import BigIntegerField, Count, Exists, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Now

from agents.models import NOT_RUN, CallStatus, Refund, RunStatus, ToolCall
from agents.selectors import (
    failed_unseen,
    orders_with_refunded_total,
    refund_call_order_number,
    refund_calls_still_to_happen,
)
from agents.tools import REGISTRY
from approvals.models import ApprovalRequest, ApprovalStatus
from tickets import selectors as ticket_selectors
from tickets.models import AGENT_STAYS_OUT, ActorKind, AuthorKind, Message, Order, Ticket, TicketEvent
from tickets.money import format_money
from tickets.presenters import attachment_item, attachment_items

# Tools whose effect is a message already in the conversation: their calls would say it twice.
_SHOWN_AS_MESSAGES = frozenset({"post_reply", "add_internal_note", "hand_off_to_human"})
_CALL_OUTCOMES = {
    CallStatus.STARTED: "in progress",
    CallStatus.FAILED: "failed",
    CallStatus.UNCERTAIN: "outcome uncertain",
    CallStatus.AWAITING_APPROVAL: "waiting for approval",
    CallStatus.REJECTED: "rejected by staff",
    CallStatus.AWAITING_CONFIRMATION: "waiting for the customer to confirm",
    CallStatus.CANCELLED: "not confirmed by the customer",
}
DECIDED_STATUSES = [ApprovalStatus.APPROVED, ApprovalStatus.REJECTED, ApprovalStatus.EXPIRED, ApprovalStatus.WITHDRAWN]


# --- Words ---------------------------------------------------------------------------------


def _normalized(text: str) -> str:
    return " ".join(text.split()).casefold()


def agent_words(parts: Iterable[str], *, customer_texts: Iterable[str]) -> str:
    """The parts that are the agent's own words: a part the customer wrote (the offline model
    passes the customer's request as a refund's ``reason``) is a quote, not reasoning."""
    # The model reads consecutive customer messages as one request, joined by a space.
    said = _normalized(" ".join(customer_texts))
    kept: list[str] = []
    for part in parts:
        text = " ".join((part or "").split())
        if not text or _normalized(text) in said or text in kept:
            continue
        kept.append(text)
    return " ".join(kept)


def tool_label(name: str) -> str:
    """The tool as people read it: its registered label, else its name in words."""
    tool = REGISTRY.get(name)
    if tool is not None and tool.public_label:
        return tool.public_label
    return name.replace("_", " ").capitalize()


def _quoted(value: Any, limit: int | None = 120) -> str:
    text = " ".join(str(value).split())
    return f"“{text[: limit - 1]}…”" if limit is not None and len(text) > limit else f"“{text}”"


def action_sentence(*, tool_name: str, arguments: dict[str, Any], currency: str) -> str:
    """What approving does, as a sentence: "Refund $649.00 of order E-5001 to the customer's ..."."""
    if tool_name == "issue_refund":
        amount = arguments.get("amount_cents")
        money = format_money(int(amount), arguments.get("currency") or currency) if isinstance(amount, int) else "?"
        number = arguments.get("order_number", "?")
        return f"Refund {money} of order {number} to the customer's original payment method"
    # Every argument whole: approving is bound to these exact arguments, so staff see all of what
    # they approve (an email's whole body, not its opening).
    details = "; ".join(
        f"{key.replace('_', ' ')}: {_quoted(value, limit=None)}" for key, value in sorted(arguments.items())
    )
    label = tool_label(tool_name)
    return f"{label} ({details})" if details else label


def _call_words(call: ToolCall, currency: str) -> str:
    """A tool call in the conversation, from staff's side: "looked up order E-5001"."""
    args = call.arguments or {}
    if call.name == "lookup_order":
        text = f"looked up order {args.get('order_number', '')}"
    elif call.name == "list_orders":
        text = "listed the customer's orders"
    elif call.name == "search_help":
        text = f"searched the help articles for {_quoted(args.get('query', ''))}"
    elif call.name == "issue_refund":
        sentence = action_sentence(tool_name=call.name, arguments=args, currency=currency)
        what = sentence.removeprefix("Refund ")
        text = f"refunded {what}" if call.status == CallStatus.SUCCEEDED else f"asked to refund {what}"
    elif call.name == "notify_customer_by_email":
        text = f"emailed the customer {_quoted(args.get('subject', ''))}"
    else:
        text = f"used “{tool_label(call.name)}”"
    outcome = _CALL_OUTCOMES.get(call.status)
    return f"{text} ({outcome})" if outcome else text


# --- Cards ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConversationEntry:
    kind: str  # customer, agent, staff, system, or tool (one of the agent's tool calls)
    who: str
    text: str
    at: datetime
    internal: bool = False


@dataclass(frozen=True)
class RefundEntry:
    """A refund on an order: paid or tried (a refund row), or asked for and not paid yet (a call
    still to happen: ``asked``, with its pending approval request if it waits for one)."""

    amount: str
    status: str
    at: datetime
    ticket_id: int
    asked: bool = False
    request_id: int | None = None
    call_id: int | None = None


@dataclass
class ApprovalCard:
    approval: ApprovalRequest
    sentence: str
    reasoning: str
    conversation: list[ConversationEntry]
    order: Order | None = None
    order_facts: str = ""
    # The other refunds on the order, the first CARD_LISTS (paid or tried before those only asked
    # for), and how many more there are.
    refunds: list[RefundEntry] = field(default_factory=list)
    refunds_more: int = 0
    over_refund_warning: str = ""
    # The other refunds asked for on the same order, in any ticket, not paid yet (read when the card is
    # shown): the first CARD_LISTS, and how many in all.
    others_asked: list[RefundEntry] = field(default_factory=list)
    others_asked_count: int = 0
    others_asked_more: int = 0
    needs_confirmation: bool = False
    confirmation_text: str = ""
    # The files the customer sent on the ticket (a photo of the damage, a receipt).
    attachments: list[dict[str, Any]] = field(default_factory=list)
    # The ticket's timeline number when the card was read (before its conversation): the Approve form
    # sends it back, and an approval is refused if the customer wrote after it (a message staff never saw).
    seen_seq: int = 0
    # What the customer wrote after the agent asked for this approval, the latest WROTE_AFTER_SHOWN
    # (oldest first), and whether they wrote more: shown above the buttons, not only in the folded
    # conversation (an approval from a page that showed "please cancel the refund" stands).
    written_after: list[ConversationEntry] = field(default_factory=list)
    written_after_more: bool = False
    # A refund's card: the payment provider's refunds outside the ledger it shows ("read:" and their ids,
    # or "unread"). The Approve form sends it back, and the decision keeps what the card showed
    # (``services.approval_decide``): money held there beyond it stops the refund next to its payment.
    provider_seen: str = "unread"


def approval_attachments(*, tickets: Iterable[int]) -> dict[int, list[dict[str, Any]]]:
    """The files the customers sent on these tickets, for the cards: ticket id -> files, oldest first."""
    files: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for attachment in ticket_selectors.tickets_attachments(ticket_ids=tickets):
        files[attachment.message.ticket_id].append(attachment_item(attachment))
    return files


def approval_needs_confirmation(approval: ApprovalRequest) -> bool:
    """Approving this asks for the amount to be confirmed once more: above settings.APPROVAL_CONFIRM_ABOVE_CENTS,
    an amount of APPROVAL_POLICY_CURRENCY's currency: a level set with the deployment's settings, and read in
    the currency they name now (not the one of the run's version, which pins its own threshold and currency:
    a level set in euros after a redeploy is no level in dollars). An amount in another currency is never
    compared with it (£480.00 is no $480.00), as the policy's threshold is not: it always asks."""
    if approval.amount_cents is None:
        return False
    if (approval.currency or "").lower() != settings.APPROVAL_POLICY_CURRENCY:
        return True
    return approval.amount_cents > settings.APPROVAL_CONFIRM_ABOVE_CENTS


def approval_confirmation_text(approval: ApprovalRequest) -> str:
    what = "a refund of " if approval.tool_name == "issue_refund" else ""
    return f"I confirm {what}{approval.amount_display}"


def own_tickets(*, user: AbstractBaseUser, ticket_ids: Iterable[int]) -> set[int]:
    """The tickets among ``ticket_ids`` whose customer is this member of staff: the customer profile of
    their login, or one under their email address (the same person shopping under a second login, who
    would otherwise approve their own refund). Their requests are a colleague's to decide."""
    mine = ticket_selectors.customers_of_person(user=user)
    return set(Ticket.objects.filter(customer__in=mine, pk__in=list(ticket_ids)).values_list("pk", flat=True))


def approvals_pending() -> QuerySet[ApprovalRequest]:
    """Oldest first: the customer who has waited longest is served first. A request past its expiry
    is not among them, though the sweeper has yet to mark it (a decision on it would be refused); it
    is judged on the database's clock, as the decision and the sweeper judge it. Nor is one whose ticket
    a person has taken (``approvals_a_person_took_ids``)."""
    return (
        ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING, expires_at__gt=Now())
        .exclude(a_person_took_it())
        .select_related("ticket", "ticket__customer")
        .order_by("requested_at", "id")
    )


def a_person_took_it() -> Q:
    """A pending request whose ticket a person has (taken over, or closed), or took after the run paused
    for it and handed back: what the run waited for was withdrawn by that take-over, and a decision is
    refused (``agents.selectors.person_took_the_ticket_since``), whether or not a worker has ended the
    run yet. In the timeline's order: after the run's last pause for a decision."""
    paused = (
        TicketEvent.objects.filter(
            ticket_id=OuterRef(OuterRef("ticket_id")), kind=f"agent_run_{RunStatus.WAITING_APPROVAL}"
        )
        .annotate(run_ref=Cast(KT("payload__run_id"), BigIntegerField()))
        .filter(run_ref=OuterRef(OuterRef("tool_call__run_id")))
        .order_by("-seq")
        .values("seq")[:1]
    )
    taken = TicketEvent.objects.filter(
        ticket_id=OuterRef("ticket_id"),
        kind="status_changed",
        payload__to__in=sorted(AGENT_STAYS_OUT),
        seq__gt=Subquery(paused),
    )
    return Q(ticket__status__in=AGENT_STAYS_OUT) | Q(Exists(taken))


def approvals_a_person_took_ids(*, limit: int = 200) -> list[int]:
    """Requests still pending in the table whose ticket a person has since taken (``a_person_took_it``):
    the agent withdraws them at its next pass on the ticket, and a decision meanwhile is refused, so the
    dashboard offers none; a card of one it still shows says it was withdrawn."""
    return list(
        ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING)
        .filter(a_person_took_it())
        .order_by("-id")
        .values_list("pk", flat=True)[:limit]
    )


def approvals_pending_mark() -> tuple[int, int, int]:
    """Moves whenever what the dashboard lists does: the pending requests (how many, and the sum of their
    ids: a request leaves and one is added, the new id is above every old one, so the sum moves) and their
    tickets' timelines (what the customer wrote after a request, quoted on its card). One aggregate read,
    for a dashboard's socket that has heard nothing for a while."""
    row = approvals_pending().aggregate(count=Count("id"), ids=Sum("id"), seqs=Sum("ticket__last_event_seq"))
    return row["count"], row["ids"] or 0, row["seqs"] or 0


def approvals_past_expiry_ids(*, limit: int = 200) -> list[int]:
    """Requests still pending in the table but past their expiry (the sweeper has yet to mark them):
    the dashboard says a card of one that it still shows ran out of time, not that someone decided it."""
    return list(
        ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING, expires_at__lte=Now())
        .order_by("-expires_at")
        .values_list("pk", flat=True)[:limit]
    )


# Cards on the dashboard at once, oldest first; the rest are counted, and come in as these are decided
# (a card reads its ticket's conversation: ten thousand of them would be a page nobody could load).
PENDING_SHOWN = 50


def pending_cards() -> tuple[list[ApprovalCard], int]:
    """The oldest PENDING_SHOWN pending requests as cards, and how many more are waiting."""
    pending = approvals_pending()
    cards = approval_cards(pending[:PENDING_SHOWN])
    # Counted after the cards were read: a decision in between must not make it negative.
    more = max(0, pending.count() - len(cards)) if len(cards) == PENDING_SHOWN else 0
    return cards, more


def _together(parts: list[QuerySet[Any]]) -> list[Any]:
    """The rows of several reads, each ordered and sliced, in one statement (UNION ALL)."""
    if len(parts) < 2:
        return list(parts[0]) if parts else []
    return list(parts[0].union(*parts[1:], all=True))


def approval_conversations(
    *, tickets: Iterable[int], currency_of: dict[int, str], limit: int = 40
) -> dict[int, list[ConversationEntry]]:
    """Each ticket's messages (internal notes marked) and the agent's tool calls, the latest ``limit``,
    oldest first: ticket id -> entries. Four queries for all the tickets.

    In the timeline's order (each message's and call's event), as the chat and the staff ticket page
    show them, not by the times the hosts that wrote them read on their own clocks: with one web
    server's clock behind, a customer's "don't refund it after all" written there after their
    request was shown above it, on the card a person reads before approving the refund.
    ``currency_of``: the currency each ticket's amounts are shown in."""
    tickets = sorted(tickets)
    found = _together(
        [
            part
            for ticket_id in tickets
            for part in (
                _events_of(ticket_id, "message", "message_id", limit),
                _events_of(ticket_id, "tool_call_started", "call_id", limit),
            )
        ]
    )
    said = {row_id: seq for kind, seq, row_id in found if kind == "message"}
    did = {row_id: seq for kind, seq, row_id in found if kind == "tool_call_started"}
    messages = Message.objects.filter(pk__in=list(said), ticket_id__in=tickets)
    calls = ToolCall.objects.filter(pk__in=list(did), ticket_id__in=tickets).exclude(name__in=_SHOWN_AS_MESSAGES)
    messages, calls = list(messages), list(calls)
    staff_ids = {m.author_user_id for m in messages if m.author_kind == AuthorKind.STAFF and m.author_user_id}
    staff = get_user_model().objects.in_bulk(staff_ids) if staff_ids else {}
    placed: dict[int, list[tuple[int, ConversationEntry]]] = {ticket_id: [] for ticket_id in tickets}
    for message in messages:
        who = message.get_author_kind_display()
        author = staff.get(message.author_user_id)
        if message.author_kind == AuthorKind.STAFF and author is not None:
            who = f"Staff ({author.get_username()})"
        entry = ConversationEntry(
            kind=message.author_kind, who=who, text=message.body, at=message.created_at, internal=not message.is_public
        )
        placed[message.ticket_id].append((said[message.pk], entry))
    for call in calls:
        words = _call_words(call, currency_of.get(call.ticket_id) or "usd")
        entry = ConversationEntry(kind="tool", who="Agent", text=words, at=call.started_at)
        placed[call.ticket_id].append((did[call.pk], entry))
    return {
        ticket_id: [entry for _, entry in sorted(entries, key=lambda item: item[0])][-limit:]
        for ticket_id, entries in placed.items()
    }


def _events_of(ticket_id: int, kind: str, names: str, limit: int) -> QuerySet[Any]:
    """The latest ``limit`` events of ``kind`` on the ticket: (kind, seq, the id of the row the
    payload ``names``), read backwards through the timeline's index and stopped at ``limit``."""
    row_id = Cast(KT(f"payload__{names}"), BigIntegerField())
    events = TicketEvent.objects.filter(ticket_id=ticket_id, kind=kind)
    if kind == "tool_call_started":
        events = events.exclude(payload__tool__in=sorted(_SHOWN_AS_MESSAGES))
    return events.annotate(row_id=row_id).order_by("-seq").values_list("kind", "seq", "row_id")[:limit]


def page_mark_of_a_request(approval: ApprovalRequest) -> int:
    """The ticket's timeline number of the event that asked for ``approval``: what a card showed at the
    least (0 when the event is not found: nothing is taken as shown)."""
    asked = TicketEvent.objects.filter(
        ticket_id=approval.ticket_id, kind="approval_requested", payload__approval_id=approval.pk
    ).values_list("seq", flat=True)
    return int(asked.first() or 0)


def ticket_last_seq(ticket_id: int) -> int:
    """The ticket's last timeline number now: no page of it has shown a later one."""
    return int(Ticket.objects.filter(pk=ticket_id).values_list("last_event_seq", flat=True).first() or 0)


# The customer's messages after a request a card quotes; the others are in its conversation.
WROTE_AFTER_SHOWN = 3


def customer_words_after_the_requests(approvals: list[ApprovalRequest]) -> dict[int, list[ConversationEntry]]:
    """Each request's customer messages written after it was asked for (after its timeline event:
    ledger order, whatever the hosts' clocks), the latest WROTE_AFTER_SHOWN + 1, oldest first:
    approval id -> entries. Two queries for all the requests."""
    asked = dict(
        TicketEvent.objects.filter(
            ticket_id__in={a.ticket_id for a in approvals},
            kind="approval_requested",
            payload__approval_id__in=[a.pk for a in approvals],
        ).values_list("payload__approval_id", "seq")
    )
    reads = {
        approval.pk: TicketEvent.objects.filter(
            ticket_id=approval.ticket_id,
            seq__gt=asked[approval.pk],
            kind="message",
            actor_kind=ActorKind.CUSTOMER,
            is_public=True,
        )
        .order_by("-seq")
        .annotate(approval_id=Value(approval.pk))[: WROTE_AFTER_SHOWN + 1]
        for approval in approvals
        if approval.pk in asked
    }
    words: dict[int, list[ConversationEntry]] = defaultdict(list)
    for event in sorted(_together(list(reads.values())), key=lambda e: e.seq):
        payload = event.payload if isinstance(event.payload, dict) else {}
        text = str(payload.get("body") or "")
        files = [str(item["name"]) for item in attachment_items(payload)]
        if files:  # a message of files alone reads as their names (they are on the card, below)
            text = " ".join([text, f"[attached: {', '.join(files)}]"]).strip()
        words[event.approval_id].append(
            ConversationEntry(kind=AuthorKind.CUSTOMER, who="Customer", text=text, at=event.created_at)
        )
    return words


def _customer_texts(conversation: list[ConversationEntry]) -> list[str]:
    return [entry.text for entry in conversation if entry.kind == AuthorKind.CUSTOMER]


def _order_number(approval: ApprovalRequest) -> str:
    return str((approval.evidence or {}).get("order_number") or "")


def approval_cards(approvals: Iterable[ApprovalRequest]) -> list[ApprovalCard]:
    """Everything the card shows. Orders and the pending requests on them are read once for all cards."""
    approvals = list(approvals)
    numbers = {_order_number(a) for a in approvals} - {""}
    orders = {o.number: o for o in orders_with_refunded_total(Order.objects.filter(number__in=numbers))}
    pending_on_order = _pending_refunds_on(numbers)
    refunds_by_order = order_refunds(orders.values())
    tickets = {approval.ticket_id for approval in approvals}
    currency_of = {approval.ticket_id: approval.currency for approval in approvals}
    conversations = approval_conversations(tickets=tickets, currency_of=currency_of)
    files = approval_attachments(tickets=tickets)
    wrote_after = customer_words_after_the_requests(approvals)
    cards = []
    warnings: dict[str, str] = {}
    for approval in approvals:
        conversation = conversations[approval.ticket_id]
        card = ApprovalCard(
            approval=approval,
            sentence=action_sentence(
                tool_name=approval.tool_name, arguments=approval.arguments, currency=approval.currency
            ),
            # Filtered again on reading: requests recorded before the fix hold the customer's words.
            reasoning=agent_words([approval.agent_reasoning], customer_texts=_customer_texts(conversation)),
            conversation=conversation,
            needs_confirmation=approval_needs_confirmation(approval),
            confirmation_text=approval_confirmation_text(approval),
            attachments=files.get(approval.ticket_id, []),
            seen_seq=approval.ticket.last_event_seq,
            written_after=wrote_after.get(approval.pk, [])[-WROTE_AFTER_SHOWN:],
            written_after_more=len(wrote_after.get(approval.pk, [])) > WROTE_AFTER_SHOWN,
        )
        order = orders.get(_order_number(approval))
        if order is not None:
            if order.number not in warnings:
                warnings[order.number] = _over_refund_warning(order, *pending_on_order.get(order.number, (0, 0, [])))
            others = [r for r in refunds_by_order[order.pk] if r.call_id != approval.tool_call_id]
            _add_order(card, order, warnings[order.number], others)
        cards.append(card)
    return cards


def _asked_status(call: ToolCall, request_id: int | None) -> str:
    if request_id is not None:
        return f"Asked, waiting for approval (request #{request_id})"
    return f"Asked, {_CALL_OUTCOMES.get(call.status, call.get_status_display().lower())}"


# A failed refund the provider has not shown yet may still be paid: a reviewer approving another
# refund on the order reads that it is not over (the request may still be on its way).
UNSEEN_YET = ", not found at the payment provider yet: it may still be paid (checked again for a while)"


def order_refunds(orders: Iterable[Order]) -> dict[int, list[RefundEntry]]:
    """Every refund on these orders, in any ticket, oldest first: order id -> entries. The refunds
    paid or tried (done, pending, uncertain, failed), and those asked for and not paid yet (waiting
    for an approval, for the customer's Confirm, or about to run), with their approval request.
    Three queries for all the orders."""
    orders = list(orders)
    entries: dict[int, list[RefundEntry]] = defaultdict(list)
    unseen = set(Refund.objects.filter(failed_unseen(), order__in=orders).values_list("pk", flat=True))
    for refund in Refund.objects.filter(order__in=orders).order_by("created_at", "id"):
        entries[refund.order_id].append(
            RefundEntry(
                amount=format_money(refund.amount_cents, refund.currency),
                status=refund.get_status_display() + (UNSEEN_YET if refund.pk in unseen else ""),
                at=refund.created_at,
                ticket_id=refund.ticket_id,
                call_id=refund.tool_call_id,
            )
        )
    by_number = {(o.customer_id, o.number.upper()): o for o in orders}
    calls = [
        (call, order)
        for call in refund_calls_still_to_happen(customer_ids={o.customer_id for o in orders}).select_related("ticket")
        if (order := by_number.get((call.ticket.customer_id, refund_call_order_number(call.arguments))))
    ]
    waiting = dict(
        ApprovalRequest.objects.filter(
            status=ApprovalStatus.PENDING, tool_call_id__in=[call.pk for call, _ in calls]
        ).values_list("tool_call_id", "pk")
    )
    for call, order in calls:
        amount = call.arguments.get("amount_cents")
        currency = call.arguments.get("currency") or order.currency
        entries[order.pk].append(
            RefundEntry(
                amount=format_money(amount, currency) if isinstance(amount, int) else "?",
                status=_asked_status(call, waiting.get(call.pk)),
                at=call.started_at,
                ticket_id=call.ticket_id,
                asked=True,
                request_id=waiting.get(call.pk),
                call_id=call.pk,
            )
        )
    for order_entries in entries.values():
        order_entries.sort(key=lambda entry: entry.at)
    return entries


def approval_other_refunds(approval: ApprovalRequest) -> list[RefundEntry]:
    """The other refunds on the order a refund request names, in any ticket, as they are now (paid,
    tried, or asked for and not paid yet); [] for a request that names no order of its customer."""
    number = _order_number(approval).upper()
    if approval.tool_name != "issue_refund" or not number:
        return []
    order = Order.objects.filter(customer_id=approval.ticket.customer_id, number__iexact=number).first()
    if order is None:
        return []
    return [r for r in order_refunds([order])[order.pk] if r.call_id != approval.tool_call_id]


def _add_order(card: ApprovalCard, order: Order, warning: str, refunds: list[RefundEntry]) -> None:
    evidence = card.approval.evidence
    currency = order.currency
    facts = [
        f"{order.number}: {evidence.get('order_status', order.status)}",
        f"total {format_money(int(evidence.get('order_total_cents', order.total_cents)), currency)}",
        f"refunded before this request {format_money(int(evidence.get('refunded_before_cents', 0)), currency)}",
    ]
    if evidence.get("delivered_at"):
        facts.append(f"delivered {evidence['delivered_at']}")
    held = evidence.get("provider")
    if held is not None and held.get("read"):
        card.provider_seen = "read:" + ",".join(map(str, held.get("ids", [])))
    if held is None:
        facts.append("the payment provider's refunds on this payment not read yet")
    elif not held.get("read"):
        facts.append("the payment provider's refunds could not be read (check there before approving)")
    elif held.get("ids"):
        facts.append(
            f"the payment provider holds {format_money(int(held.get('cents', 0)), currency)} refunded on this "
            f"payment outside this ledger ({', '.join(map(str, held['ids']))}): made in its dashboard or elsewhere"
        )
    # Each card names a few: every card of an order named all the others, so many requests on one order
    # made a dashboard that grew with the square of their number.
    done_or_tried, asked = [r for r in refunds if not r.asked], [r for r in refunds if r.asked]
    card.order, card.order_facts = order, ", ".join(facts)
    card.refunds = (done_or_tried + asked)[:CARD_LISTS]
    card.refunds_more = len(refunds) - len(card.refunds)
    card.over_refund_warning = warning
    card.others_asked, card.others_asked_count = asked[:CARD_LISTS], len(asked)
    card.others_asked_more = len(asked) - len(card.others_asked)


# Requests a warning names one by one; the rest are counted.
WARNING_LISTS = 10
# Refunds (paid, tried or asked for) a card names on its order; the rest are counted.
CARD_LISTS = 10


def _pending_refunds_on(numbers: Iterable[str]) -> dict[str, tuple[int, int, list[ApprovalRequest]]]:
    """Per order number: how many refund requests are pending on it, the cents they ask for, and the
    oldest WARNING_LISTS of them. Counted in the database: ten thousand of them are two rows."""
    numbers = sorted(numbers)
    pending = ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING, tool_name="issue_refund")
    totals = (
        pending.filter(evidence__order_number__in=numbers)
        .values("evidence__order_number")
        .annotate(n=Count("id"), asked=Sum("amount_cents"))
        .order_by()
    )
    parts = [
        pending.filter(evidence__order_number=number).order_by("requested_at", "id")[:WARNING_LISTS]
        for number in numbers
    ]
    oldest: dict[str, list[ApprovalRequest]] = defaultdict(list)
    for request in sorted(_together(parts), key=lambda r: (r.requested_at, r.pk)):
        oldest[_order_number(request)].append(request)
    return {
        str(row["evidence__order_number"]): (
            row["n"],
            int(row["asked"] or 0),
            oldest[str(row["evidence__order_number"])],
        )
        for row in totals
    }


def _over_refund_warning(order: Order, count: int, asked: int, oldest: list[ApprovalRequest]) -> str:
    """The warning when the order's ``count`` pending requests ask (``asked`` cents) for more than it
    can still refund ("" if they do not), naming the ``oldest``: the same on every card of the
    order, so made once per order."""
    currency = order.currency
    # A refund failed unseen may still be paid: the refund's rules count it against what is left.
    unseen = int(order.unseen_cents)
    refundable = max(0, order.total_cents - order.refunded_cents - unseen)
    if asked <= refundable:
        return ""
    named = ", ".join(f"#{p.pk} ({p.amount_display})" for p in oldest[:WARNING_LISTS])
    rest = f" and {count - WARNING_LISTS} more" if count > WARNING_LISTS else ""
    may_still = (
        f", failed unseen by the payment provider and may still be paid {format_money(unseen, currency)}"
        if unseen
        else ""
    )
    return (
        f"{count} pending request{'s' if count != 1 else ''} on order {order.number} "
        f"add up to {format_money(asked, currency)}, more than the {format_money(refundable, currency)} "
        f"it can still refund (total {format_money(order.total_cents, currency)}, "
        f"refunded {format_money(order.refunded_cents, currency)}{may_still}). "
        f"Requests: {named}{rest}."
    )


# --- History -------------------------------------------------------------------------------


def approval_deciders() -> QuerySet[AbstractBaseUser]:
    """Everyone who has decided a request, by username (the history's decider filter)."""
    decided = ApprovalRequest.objects.filter(decided_by__isnull=False).values("decided_by")
    return get_user_model().objects.filter(pk__in=decided).order_by("username")


def stopped_before_it_ran(approval: ApprovalRequest) -> str:
    """Why an approved request's call ended without running ('' if it ran, or was not approved):
    from ``approvals_decided``'s annotation."""
    unrun = getattr(approval, "unrun", None)
    if approval.status != ApprovalStatus.APPROVED or not unrun or getattr(approval, "asked_again_as", None):
        return ""
    return unrun.removeprefix(NOT_RUN).lstrip(": ").strip() or "its run ended"


def what_came_of_it(approval: ApprovalRequest) -> str:
    """What became of an approved request's call when it was not done, in words for the history ('' when
    it was done, or the request was not approved, or asked again): waiting for the customer's Confirm,
    not confirmed by them, failed, uncertain, or not run yet. From ``approvals_decided``'s annotations;
    a call stopped before it ran is ``stopped_before_it_ran``'s."""
    if approval.status != ApprovalStatus.APPROVED or getattr(approval, "asked_again_as", None):
        return ""
    if stopped_before_it_ran(approval):
        return ""
    status, error = getattr(approval, "call_status", None), (getattr(approval, "call_error", None) or "").strip()
    why = f" ({error[:200]})" if error else ""
    if status == CallStatus.SUCCEEDED or status is None:
        return ""
    if status == CallStatus.AWAITING_CONFIRMATION:
        return "then waiting for the customer to confirm it: not done yet"
    if status == CallStatus.CANCELLED:
        return f"then not confirmed by the customer{why}: nothing was done"
    if status == CallStatus.FAILED:
        return f"then it failed{why}: see the ticket"
    if status == CallStatus.UNCERTAIN:
        return f"then its outcome was left uncertain{why}: see the ticket before acting on it"
    return "not carried out yet"


def approvals_decided(
    *, decision: str = "", decider: str = "", ticket_id: int | None = None
) -> QuerySet[ApprovalRequest]:
    """Decided requests, newest first (every one: the page shows them a page at a time); ``decision``
    one of DECIDED_STATUSES, ``decider`` a username, ``ticket_id`` one ticket's."""
    approvals = ApprovalRequest.objects.exclude(status=ApprovalStatus.PENDING)
    if decision:
        approvals = approvals.filter(status=decision)
    if decider:
        approvals = approvals.filter(decided_by__username=decider)
    if ticket_id is not None:
        approvals = approvals.filter(ticket_id=ticket_id)
    # A decision left behind by a newer request of the same call (its arguments changed after it,
    # so the agent asked again): the history names the request that replaced it.
    newer = ApprovalRequest.objects.filter(tool_call_id=OuterRef("tool_call_id"), pk__gt=OuterRef("pk"))
    # An approved call that never ran (a person took the ticket, the customer cancelled, the run
    # ended): the history says so beside "Approved", with why, so nobody reads it as done.
    unrun = ToolCall.objects.filter(pk=OuterRef("tool_call_id"), error__startswith=NOT_RUN).values("error")[:1]
    # And what became of an approved call that did run, or waits to (what_came_of_it).
    call = ToolCall.objects.filter(pk=OuterRef("tool_call_id"))
    return (
        approvals.annotate(
            asked_again_as=Subquery(newer.order_by("pk").values("pk")[:1]),
            unrun=Subquery(unrun),
            call_status=Subquery(call.values("status")[:1]),
            call_error=Subquery(call.values("error")[:1]),
        )
        .select_related("ticket", "ticket__customer", "decided_by")
        .order_by("-decided_at", "-id")
    )
