"""Refunds: the ``issue_refund`` tool, its guardrails, its approval rules, its ledger and reconciliation.

Business rules are enforced here, in code, never trusted to the prompt. They are
checked when the call's intent is recorded, before any approval is asked
(``refund_precheck``), and again each time the refund executes (also after an
approval wait):

- the order belongs to the ticket's customer;
- the order is in a refundable state;
- the currency is the order's;
- the amount is positive and at most what remains refundable, counting every
  refund that has happened or may have happened (pending and uncertain ones too,
  and failed ones the provider has not shown yet: ``failed_unseen``);
- the amount is one the provider takes in the currency (``tickets.money.amount_step``:
  a three-decimal currency's ends in 0, ISK's in whole krónur).

Whether a refund needs a staff approval is decided with its intent
(``refund_approval_reason``), from the ledger, whatever the model says:

- every refund of a flagged customer;
- a refund on an order on which staff rejected a refund before, in any ticket;
- a second refund on an order that already has one (done, pending or waiting
  for approval) in the same ticket;
- a refund that takes the order's refunds (done, pending, uncertain or waiting
  for approval, plus this one) above the policy's threshold;
- a refund that takes the customer's refunds in the policy's rolling window
  above the per-customer limit;
- asked next to the payment, for a refund nobody reviewed: money the payment
  provider has refunded on the order's payment that the ledger does not count
  (``_unknown_at_the_provider``: the provider's record wins); for a refund staff
  approved, such money its card did not show them hands it back to staff
  (``_held_since_the_approval``; the card reads it when the request is made).
  A send made without those refunds read for it (none of the reads answered, or
  a refund tried again after a crash or an outage) is decided by what the
  look-up under its key reads of them (``_held_back_for_money_at_the_provider``).

The provider call carries the tool call's idempotency key. The provider is asked
what happened under the key before every try, the first included (Stripe forgets
a key after 24 hours, and a key may have been used before: by the deployment a
state bundle came from, or long ago); a refund it finds is recorded, not sent
again. Retries under that key back off (exponential, with jitter, bounded). Only a refund the provider calls
``succeeded`` is a success; ``pending`` and ``requires_action`` stay open and
the reconciler settles them; ``failed``, ``canceled``, a refusal, or an answer
that never comes send the ticket to a person, and the customer is told in
plain words.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NoReturn

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import BigIntegerField, CharField, JSONField, Q, QuerySet, Sum, Value
from django.utils import timezone
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

from agents import faults
from agents.approval import may_execute
from agents.lease import ticket_lease_held
from agents.models import (
    NOT_RUN,
    OPEN_REFUND_STATUSES,
    PERSON_TOOK_OVER,
    REFUND_TRANSITIONS,
    RESERVING_REFUND_STATUSES,
    AgentRun,
    ApprovalDecision,
    CallStatus,
    ConfirmationDecision,
    Refund,
    RefundStatus,
    RefundTold,
    ReplayPolicy,
    ToolCall,
)
from agents.outage import patience_seconds
from agents.profiles import policy_values, profile_of
from agents.selectors import (
    customer_wrote_since_the_go_ahead,
    failed_unseen,
    failed_unseen_cents,
    payment_left_cents,
    person_took_the_ticket_since,
    refund_call_order_number,
    refund_calls_still_to_happen,
    refunded_total_cents,
)
from agents.tools import (
    CustomerWroteSince,
    Tool,
    ToolContext,
    ToolError,
    ToolEscalation,
    ToolNeedsApproval,
    ToolStopped,
    customer_order,
    register,
)
from payments.provider import (
    WAIT_AND_ASK_AGAIN,
    PaymentProvider,
    ProviderDeclined,
    ProviderError,
    ProviderRefund,
    ProviderUncertain,
    ProviderUnreachable,
    refund_under_key,
)
from support import rounds
from support.clock import database_now
from tickets import services as ticket_services
from tickets.models import REFUNDABLE_ORDER_STATUSES, ActorKind, AuthorKind, Customer, Order, OrderStatus
from tickets.money import amount_step, format_money

logger = logging.getLogger(__name__)

# The largest amount a refund may name: what a JSON number holds exactly, far below the column's limit.
MAX_REFUND_CENTS = 2**53 - 1

# Stripe's refund statuses, by what they mean for our ledger.
PROVIDER_SUCCEEDED = frozenset({"succeeded"})
PROVIDER_FAILED = frozenset({"failed", "canceled"})
# Anything else (pending, requires_action, a status newer than this code) stays open.
# Our statuses of a refund the provider paid or is paying: reported as done, never handed over as failed.
PAID_OR_PAYING = frozenset({RefundStatus.SUCCEEDED, RefundStatus.PENDING})

_provider: PaymentProvider | None = None


def provider() -> PaymentProvider:
    global _provider
    if _provider is None:
        _provider = PaymentProvider()
    return _provider


def _sleep(seconds: float) -> None:
    """The pause between provider retries (replaced in tests to record the waits)."""
    time.sleep(seconds)


def refund_commitments(
    *, customer_id: int, order: Order | None = None, ticket_id: int | None = None, since: Any = None
) -> tuple[int, int]:
    """(how many, how many cents) of refunds done or possibly coming for a customer.

    Counts refunds that happened or may have happened (a refund failed without the
    provider ever showing it included, while it is still asked about), and refund
    calls with no refund row yet whose refund may still happen: any call not final (recorded
    to run, waiting for a staff approval, or waiting for the customer's
    confirmation, approved or not) of a run that has not ended; narrowed to one
    order, one ticket, or a window (the refunds made since ``since``, and every call still
    to happen: it is paid inside the window, if at all). Their minor units are summed
    whatever their currency: narrowed to one order, they are that order's; else see
    ``refund_commitments_by_currency``.
    """
    rows = _commitment_rows(customer_id=customer_id, order=order, ticket_id=ticket_id, since=since)
    return len(rows), sum(cents for cents, _ in rows)


def refund_commitments_by_currency(*, customer_id: int, since: Any = None) -> dict[str, tuple[int, int]]:
    """``refund_commitments`` of a customer (since ``since``), by currency: currency -> (how many, how many
    minor units). A call's currency is its order's; "" for a call whose order number names none of the
    customer's orders (it is no amount of any currency known)."""
    found: dict[str, tuple[int, int]] = {}
    for cents, currency in _commitment_rows(customer_id=customer_id, since=since):
        count, total = found.get(currency, (0, 0))
        found[currency] = (count + 1, total + cents)
    return found


def _commitment_rows(
    *, customer_id: int, order: Order | None = None, ticket_id: int | None = None, since: Any = None
) -> list[tuple[int, str]]:
    """(minor units, currency) of each refund done or possibly coming (``refund_commitments``)."""
    # A refund failed without the provider ever showing it may still happen, so it counts.
    refunds = Refund.objects.filter(
        Q(status__in=RESERVING_REFUND_STATUSES) | failed_unseen(), order__customer_id=customer_id
    )
    calls = refund_calls_still_to_happen(customer_ids=[customer_id])
    if order is not None:
        refunds = refunds.filter(order=order)
    if ticket_id is not None:
        refunds = refunds.filter(ticket_id=ticket_id)
        calls = calls.filter(ticket_id=ticket_id)
    if since is not None:
        # Only refunds already sent are narrowed to the window: one still to happen is paid now or later, inside
        # the window either way, whenever it was asked for. Narrowed by when it was asked, one waiting
        # since before the window's start (for staff: a request lives days; a window may be one) counted
        # nowhere, and the customer's next request was paid unreviewed beside it.
        refunds = refunds.filter(created_at__gte=since)
    # Both read in one statement, from one snapshot: a call leaves the calls as its refund row enters
    # the refunds, in the one commit of the worker sending it; read as two statements, one that
    # committed between them (a refund sent in another ticket of the customer) was in neither.
    refund_rows = refunds.annotate(call_arguments=Value(None, output_field=JSONField())).values_list(
        "amount_cents", "call_arguments", "currency"
    )
    call_rows = calls.annotate(
        refund_cents=Value(None, output_field=BigIntegerField()), refund_currency=Value("", output_field=CharField())
    ).values_list("refund_cents", "arguments", "refund_currency")
    found = list(refund_rows.union(call_rows, all=True))
    currencies: dict[str, set[str]] = {}
    if order is None and any(refunded is None for refunded, _, _ in found):
        # A call's currency is its order's: the customer's orders, by number as calls name them.
        for number, currency in Order.objects.filter(customer_id=customer_id).values_list("number", "currency"):
            currencies.setdefault(number.strip().upper(), set()).add(currency)
    rows = []
    for refunded, arguments, currency in found:
        if refunded is not None:  # a refund row (a call's row has no amount refunded)
            rows.append((int(refunded), currency))
            continue
        number = refund_call_order_number(arguments)
        if order is not None and number != order.number.upper():
            continue
        amount = arguments.get("amount_cents")
        named = {order.currency} if order is not None else currencies.get(number, set())
        # Orders numbered alike in several currencies ("a-1", "A-1"): none of them is its currency.
        rows.append((int(amount) if isinstance(amount, int) else 0, named.pop() if len(named) == 1 else ""))
    return rows


def _stopped_before(*, customer_id: int, order: Order) -> str | None:
    """Why a refund on this order was stopped by a person before, in any ticket of the customer, or
    None: staff rejected one, or a person took over, resolved or closed a ticket while one waited to
    be paid. Asking again, in a new ticket, a reopened one or once the first reason has gone, is not
    paid unreviewed (DESIGN.md, invariant 11)."""
    number = order.number.upper()
    mine = ToolCall.objects.filter(name="issue_refund", ticket__customer_id=customer_id)
    # A call its run left unpaid because a person took the ticket: closed while it waited, or stopped
    # next to the payment (a take-over that landed while the step was written). Its error says so; a
    # refund refused by a rule (more than the order has left) in such a run was not stopped by them.
    # A question the customer cancelled, or let expire, was theirs to stop: a person closing it after
    # that (before a worker applied the answer) did not stop a refund that waited to be paid.
    theirs = Q(confirmation_decision__in=[ConfirmationDecision.CANCELLED, ConfirmationDecision.EXPIRED])
    stopped = mine.filter(
        Q(approval_decision=ApprovalDecision.REJECTED)
        | (
            Q(run__outcome=PERSON_TOOK_OVER, error__contains=PERSON_TOOK_OVER)
            & ~Q(status=CallStatus.SUCCEEDED)
            & ~theirs
        )
    ).order_by("-pk")
    for arguments, ticket_id, decision in stopped.values_list("arguments", "ticket_id", "approval_decision"):
        if str(arguments.get("order_number", "")).strip().upper() != number:
            continue
        if decision == ApprovalDecision.REJECTED:
            return f"staff declined a refund on order {order.number} before (ticket #{ticket_id})"
        return f"a person stopped a refund on order {order.number} before (ticket #{ticket_id})"
    return None


def _check_guardrails(
    ctx: ToolContext,
    args: dict[str, Any],
    key: str | None,
    *,
    order: Order | None = None,
    listed: list[ProviderRefund] | None = None,
) -> tuple[Order, int, str]:
    """Raise ToolError with a reason the model can explain, or return (locked order, amount, currency).
    ``order``: a refund tried again, its own (the model's number may name another order by now).
    ``listed``: the payment's refunds at the provider, read just before a refund is first sent: money
    refunded there outside the ledger (``refunds_outside_the_ledger``) counts against what the payment
    has left, as the provider counts it (a payment may pay for several orders)."""
    order = order or customer_order(ctx.ticket, args["order_number"])
    order = Order.objects.select_for_update().get(pk=order.pk)  # serialises refunds of one order
    if order.status not in REFUNDABLE_ORDER_STATUSES:
        raise ToolError(f"Order {order.number} is {order.status}; only paid, shipped or delivered orders are refunded.")
    if not order.payment_reference:
        raise ToolError(f"Order {order.number} has no payment to refund.")
    currency = (args.get("currency") or order.currency).lower()
    if currency != order.currency:
        raise ToolError(f"Order {order.number} was paid in {order.currency.upper()}, not {currency.upper()}.")
    amount = args["amount_cents"]
    if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
        raise ToolError("A refund amount must be a positive whole number of cents.")
    step = amount_step(order.currency)
    if amount % step:
        # The provider refuses any other amount in this currency: never put to staff, never sent.
        # Said in words a customer may read as they are (the offline model passes them on).
        below = f"; {format_money(amount - amount % step, order.currency)} can" if amount > step else ""
        raise ToolError(
            f"Refunds in {order.currency.upper()} are made in steps of {format_money(step, order.currency)}: "
            f"{format_money(amount, order.currency)} cannot be refunded as it is{below}."
        )
    # A refund failed without the provider ever showing it may still be paid (a request on its way):
    # it counts against what is left, as an uncertain one does. Approved on a card that showed it, or
    # not, a refund on top of it could pay the order back twice (a payment for several orders lets the
    # provider take both).
    unseen = failed_unseen_cents(order, exclude_key=key)
    remaining = order.total_cents - refunded_total_cents(order, exclude_key=key) - unseen
    held = refunds_outside_the_ledger(order, key, listed) if listed and key else []
    outside = sum(found.amount_cents for found in held)
    if outside:
        left_on_payment = payment_left_cents(order, exclude_key=key) - failed_unseen_cents(
            order, exclude_key=key, whole_payment=True
        )
        remaining = min(remaining, left_on_payment - outside)
    if amount > remaining:
        counted = [
            f"{format_money(outside, order.currency)} refunded at the payment provider" if outside else "",
            f"{format_money(unseen, order.currency)} the payment provider has not shown yet and may still pay"
            if unseen
            else "",
        ]
        counting = " and ".join(words for words in counted if words)
        raise ToolError(
            f"Order {order.number} has {format_money(max(0, remaining), order.currency)} left to refund"
            f"{f' (counting {counting})' if counting else ''}; "
            f"{format_money(min(amount, MAX_REFUND_CENTS), order.currency)} is more than that."
        )
    return order, amount, currency


def refund_precheck(ctx: ToolContext, args: dict[str, Any]) -> None:
    """The guardrails, before the intent is recorded: an impossible refund never reaches staff.
    Records on the intent (``ctx.call``, not saved yet) the order the refund is checked and decided on
    (whether it needs a staff approval: ``refund_approval_reason``, in the same transaction): the
    model's number is read in any case, so the same words may name another order by the time it is
    paid (one numbered exactly so, added since), which nobody judged (``_go_ahead_given_to_another_order``).
    A card staff decide on names its own order (``agents.calls.call_record_decision``)."""
    order, _, _ = _check_guardrails(ctx, args, key=None)
    ctx.call.approval_order_number = order.number


def refund_approval_reason(ctx: ToolContext, args: dict[str, Any]) -> str | None:
    """Why this refund needs a staff approval, or None. Caller: the intent transaction (after the precheck)."""
    policy = ctx.policy or policy_values(profile_of(ctx.call.run))
    # Serialises the decisions for one customer: each sees the intents committed before it.
    customer = Customer.objects.select_for_update().get(pk=ctx.ticket.customer_id)
    if customer.requires_refund_approval:
        return "every refund for this customer is reviewed by staff"
    order = customer_order(ctx.ticket, args["order_number"])
    amount = int(args["amount_cents"])
    # The refunds still to happen first, then the stops: a refund waiting in another ticket that a
    # person stops (a take-over, a resolve, staff's "no") is among the stops from the commit that
    # takes it out of the refunds still to happen, or earlier. Read the other way round, a run ended
    # for a person between the two reads was in neither, and this refund was paid unreviewed.
    earlier, on_order = refund_commitments(customer_id=customer.pk, order=order)
    stopped = _stopped_before(customer_id=customer.pk, order=order)
    if stopped is not None:
        return f"{stopped}: asking again needs a staff approval"
    # A second refund on one order, whichever ticket asked for the first (the same request asked
    # again in a new ticket is not paid twice unreviewed); partial refunds stay possible, reviewed.
    if earlier:
        here, _ = refund_commitments(customer_id=customer.pk, order=order, ticket_id=ctx.ticket.pk)
        where = "in this ticket" if here else "(the first was asked for in another ticket)"
        return (
            f"a second refund on order {order.number} {where} needs a staff approval: order {order.number} "
            f"already has {format_money(on_order, order.currency)} refunded or pending, "
            f"{format_money(amount, order.currency)} more"
        )
    if order.currency != policy.currency:
        # The policy's amounts are in one currency, its version's (never the setting's of the day: a run
        # paused across a redeploy that changed it read its dollar threshold as euros): a refund in another
        # currency is reviewed, never compared.
        return (
            f"refunds in {order.currency.upper()} are reviewed by staff (the approval policy's amounts are in "
            f"{policy.currency.upper()})"
        )
    if on_order + amount > policy.refund_threshold_cents:
        threshold = format_money(policy.refund_threshold_cents, order.currency)
        if not on_order:
            return f"refunds above {threshold} need a staff approval"
        return (
            f"refunds above {threshold} on one order need a staff approval: order {order.number} already has "
            f"{format_money(on_order, order.currency)} refunded or pending, {format_money(amount, order.currency)} more"
        )
    # On the database's clock, as the refunds' times are compared by every host: a worker whose clock
    # runs ahead would leave out refunds still in the window, and pay the next one unreviewed.
    since = database_now() - timedelta(days=policy.customer_window_days)
    by_currency = refund_commitments_by_currency(customer_id=customer.pk, since=since)
    others = sorted(
        currency.upper() or "an order no longer found" for currency in by_currency if currency != policy.currency
    )
    if others:
        # The limit is an amount of the policy's currency: refunds in others are never added to it as if they
        # were in it (£360.00 and $100.00 made 46000, under a limit of $500.00), nor left out of it.
        return (
            f"this customer has refunds in {', '.join(others)} in the last {policy.customer_window_days} days, "
            f"which are not counted against the limit of {format_money(policy.customer_limit, policy.currency)} "
            "per customer: reviewed by staff"
        )
    _, recent = by_currency.get(policy.currency, (0, 0))
    if recent + amount > policy.customer_limit:
        return (
            f"refunds to one customer above {format_money(policy.customer_limit, order.currency)} in "
            f"{policy.customer_window_days} days need a staff approval (this customer: "
            f"{format_money(recent, order.currency)} before this {format_money(amount, order.currency)})"
        )
    return None


def refund_question(ctx: ToolContext, args: dict[str, Any]) -> str:
    """What the customer confirms, in their words, with the exact amount."""
    order = customer_order(ctx.ticket, args["order_number"])
    amount = format_money(int(args["amount_cents"]), order.currency)
    return f"Refund {amount} to the card used for order {order.number}?"


def _set_status(refund: Refund, status: str, **fields: Any) -> None:
    if status != refund.status and status not in REFUND_TRANSITIONS[refund.status]:
        raise ValueError(f"refund {refund.pk} cannot go from {refund.status} to {status}")
    refund.status = status
    # The reconciler reads how long a refund has stayed open, on whichever host it runs: on the clock
    # every host shares, as it reads it (``refund_reconcile``).
    refund.updated_at = database_now()
    for name, value in fields.items():
        setattr(refund, name, value)
    refund.save(update_fields=["status", "updated_at", *fields])


def _result(refund: Refund) -> dict[str, Any]:
    result = {
        "status": refund.status,
        "refund_id": refund.provider_refund_id,
        "order_number": refund.order.number,
        "amount_cents": refund.amount_cents,
        "currency": refund.currency,
        "amount": format_money(refund.amount_cents, refund.currency),
    }
    if refund.status == RefundStatus.PENDING:
        result["note"] = "The payment provider accepted the refund and is still processing it."
    return result


def _customer_text(refund: Refund, outcome: str) -> str:
    """What the customer reads when told this refund moved to ``outcome`` (a ``RefundTold``): by the
    reconciler (``refund_tell``) or by the run that gave up on it (its escalation)."""
    amount = format_money(refund.amount_cents, refund.currency)
    number = refund.order.number
    if outcome == RefundTold.UNCONFIRMED:
        return (
            f"We couldn't confirm your refund of {amount} for order {number} with our payment "
            "provider just now. A member of our team will check it and reply here; you don't need to ask again."
        )
    if outcome == RefundTold.PENDING:
        return (
            f"An update on your refund of {amount} for order {number}: our payment provider has it "
            "and is processing it after all. You don't need to do anything; we'll tell you here how it ends."
        )
    if outcome == RefundTold.PAID:
        return (
            f"Good news: your refund of {amount} for order {number} went through after all. "
            "Our payment provider has completed it, so you don't need to do anything more; it may take a few "
            "days to show on your statement."
        )
    return (
        f"Your refund of {amount} for order {number} could not be completed by our payment provider. "
        "A member of our team will look into it and reply here."
    )


def _staff_or(by: AbstractBaseUser | None, **otherwise: Any) -> dict[str, Any]:
    """The actor of an event: the member of staff who asked for it (an admin action), else ``otherwise``."""
    if by is not None:
        return {"actor_kind": ActorKind.STAFF, "actor_user": by}
    return otherwise


def _record_provider_state(refund: Refund, found: ProviderRefund, *, by: AbstractBaseUser | None = None) -> str:
    """Write what the provider says about this refund into the ledger. Returns the refund's status after.
    ``by``: the member of staff who asked (the admin's reconcile action), named as the actor."""
    if found.status in PROVIDER_SUCCEEDED:
        wanted = RefundStatus.SUCCEEDED
    elif found.status in PROVIDER_FAILED:
        wanted = RefundStatus.FAILED
    else:
        wanted = RefundStatus.PENDING
    with transaction.atomic():
        locked = Refund.objects.select_for_update().select_related("order").get(pk=refund.pk)
        if locked.status == wanted or locked.status == RefundStatus.SUCCEEDED:
            refund.refresh_from_db()
            return locked.status
        _set_status(
            locked, wanted, provider_refund_id=found.id, provider_status=found.status, error=_provider_error(found)
        )
        amount = format_money(locked.amount_cents, locked.currency)
        payload: dict[str, Any] = {
            "refund_id": locked.pk,
            "provider_refund_id": found.id,
            "provider_status": found.status,
            "order": locked.order.number,
            "amount_cents": locked.amount_cents,
            "currency": locked.currency,
        }
        if wanted == RefundStatus.SUCCEEDED:
            order = Order.objects.select_for_update().get(pk=locked.order_id)
            # Refunded once the money went back in full: refunds still pending or uncertain may fail yet,
            # and an order marked refunded takes no more refunds (it could not be given what is owed).
            paid_back = Refund.objects.filter(order=order, status=RefundStatus.SUCCEEDED).aggregate(
                t=Sum("amount_cents")
            )
            if (paid_back["t"] or 0) >= order.total_cents and order.status != OrderStatus.REFUNDED:
                order.status = OrderStatus.REFUNDED
                order.save(update_fields=["status"])
            kind, label, public = "refund_succeeded", f"Refund of {amount} issued", True
            if locked.told != RefundTold.NOTHING:
                # They read that it failed, could not be confirmed, or was processed after all, and a
                # person holds (or held) the ticket: both learn it was paid, in this transaction, so
                # nobody pays it again by hand.
                refund_tell(
                    refund=locked,
                    outcome=RefundTold.PAID,
                    staff=(
                        f"the payment provider holds it as {found.status} (refund {found.id}), after the customer "
                        "was told it could not be completed or confirmed. The customer has been told it went "
                        "through. Do not refund it again."
                    ),
                )
                label, payload["reported_failed"] = f"Refund of {amount} issued after all", True
        elif wanted == RefundStatus.PENDING:
            kind, label, public = "refund_pending", f"Refund of {amount} submitted; the bank is processing it", True
            if locked.told in {RefundTold.FAILED, RefundTold.UNCONFIRMED}:
                # They read that it failed or could not be confirmed: both learn the provider holds it
                # after all, in this transaction (nobody refunds it again by hand while it is paid).
                refund_tell(
                    refund=locked,
                    outcome=RefundTold.PENDING,
                    staff=(
                        f"the payment provider holds it as {found.status} (refund {found.id}), after the customer "
                        "was told it could not be completed or confirmed. The customer has been told it is being "
                        "processed. Do not refund it again: the reconciler settles it, and tells them and you how "
                        "it ends."
                    ),
                )
        else:
            kind, label, public = "refund_failed", f"The payment provider {found.status} the refund of {amount}", False
        ticket_services.event_append(
            ticket=locked.ticket_id,
            kind=kind,
            **_staff_or(
                by,
                actor_kind=ActorKind.AGENT if wanted != RefundStatus.FAILED else ActorKind.SYSTEM,
                actor_ref=f"run:{locked.tool_call.run_id}",
            ),
            payload={**payload, "label": label},
            is_public=public,
        )
    refund.refresh_from_db()
    return wanted


# How staff's note names each outcome a refund is told to have moved to.
_NOTE_SAYS = {
    RefundTold.FAILED: "is failed",
    RefundTold.UNCONFIRMED: "is {status}",
    RefundTold.PENDING: "is PENDING at the payment provider after all",
    RefundTold.PAID: "was PAID after all",
}


def refund_tell(*, refund: Refund, outcome: str, staff: str) -> bool:
    """Tell the customer (``_customer_text``) and staff (an internal note: the refund, what it is now, and
    ``staff``, why and what to do) that this refund moved to ``outcome``, unless that is the last outcome
    they were told of: False then, and nothing is said.

    Each move told is the next episode of the refund's history (``Refund.tells``), and its messages are
    keyed by its number: a refund that fails, is found pending, then fails again is told each time, and
    the same move is told once, whoever records it and however often. Caller: the transaction that
    records the move, under the refund's lock (``select_for_update``; ``refund`` is that locked row):
    two processes recording one move are told apart by the lock, and a crash leaves neither."""
    if refund.told == outcome:
        return False
    episode = refund.tells + 1
    ticket_services.message_post(
        ticket=refund.ticket_id,
        author_kind=AuthorKind.SYSTEM,
        body=_customer_text(refund, outcome),
        client_msg_id=f"refund-told:{refund.pk}:{episode}",
    )
    amount = format_money(refund.amount_cents, refund.currency)
    says = _NOTE_SAYS[outcome].format(status=refund.status)
    ticket_services.message_post(
        ticket=refund.ticket_id,
        author_kind=AuthorKind.SYSTEM,
        body=f"Refund {refund.idempotency_key} of {amount} on order {refund.order.number} {says}: {staff}",
        is_public=False,
        client_msg_id=f"refund-note:{refund.pk}:{episode}",
    )
    _told(refund, outcome)
    return True


def _told(refund: Refund, outcome: str) -> None:
    """Record that ``outcome`` is told, as the next episode. Caller: under the refund's lock."""
    refund.told, refund.tells = outcome, refund.tells + 1
    Refund.objects.filter(pk=refund.pk).update(told=refund.told, tells=refund.tells)


def _provider_error(found: ProviderRefund) -> str:
    return f"the payment provider reports this refund {found.status}" if found.status in PROVIDER_FAILED else ""


def _retrying() -> Retrying:
    first = max(0, int(settings.REFUND_RETRY_FIRST_WAIT_MS)) / 1000
    return Retrying(
        stop=stop_after_attempt(max(1, int(settings.REFUND_PROVIDER_ATTEMPTS))),
        wait=wait_exponential_jitter(
            initial=first, max=max(first, int(settings.REFUND_RETRY_MAX_WAIT_MS) / 1000), jitter=first
        ),
        retry=retry_if_exception_type(ProviderUncertain),
        sleep=lambda seconds: _sleep(seconds),
        reraise=True,
    )


GIVEN_UP = (
    "Not sent again: this refund failed earlier (the customer was told it could not be completed) and a "
    "person was asked to check it with the payment provider before refunding again. Tell the customer a "
    "member of the team is looking into it; do not ask for the refund again."
)


def issue_refund(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """The tool's effect. Keyed: safe to call again with the same call (same key)."""
    key = ctx.call.idempotency_key
    call = ToolCall.objects.get(pk=ctx.call.pk)
    if not may_execute(call):
        # The runner never gets here with such a call; this is the money path's own last door.
        raise ToolError("This refund needs a staff approval for these exact arguments before it can run.")
    reviewed = call.approval_decision == ApprovalDecision.APPROVED
    # The payment's refunds at the provider, read before a refund is first sent (outside the transaction:
    # no request to the provider holds the ledger's locks): the provider's record wins, unreviewed
    # (``_unknown_at_the_provider``) or approved on a card that did not show it (``_held_since_the_approval``),
    # and the first try's look-up under the key reads them from here.
    listed = None if Refund.objects.filter(idempotency_key=key).exists() else _payment_refunds(ctx, args)
    with ctx.fenced():
        existing = Refund.objects.select_for_update().select_related("order").filter(idempotency_key=key).first()
        if existing is not None and existing.status in PAID_OR_PAYING:
            return _result(existing)
        if existing is not None and existing.status == RefundStatus.FAILED and existing.escalated_at is not None:
            # Settled as failed and given up on: never sent again under this call, whoever gives the run
            # back. The customer told so and a person asked to check it with the provider before
            # refunding again, or, if the worker that gave up stopped before it told them (a crash
            # between its two commits), they are told now and the ticket goes to a person.
            if existing.told == RefundTold.FAILED:
                raise ToolError(GIVEN_UP)
            raise ToolEscalation(
                f"The payment provider did not complete the refund: {existing.error}",
                customer_text=_customer_text(existing, RefundTold.FAILED),
                settled=functools.partial(_paid_since_given_up, existing),
                told=functools.partial(_told_by_another, existing, RefundTold.FAILED),
            )
        # Tried again, a refund goes where its first try went: the number is read in any case, and an order
        # numbered exactly as the model wrote it, added since, is the one it names now.
        order, amount, currency = _check_guardrails(
            ctx, args, key, order=existing.order if existing else None, listed=listed
        )
        if existing is None and (given_to := _go_ahead_given_to_another_order(call, ctx, args, order)):
            raise ToolError(
                f"Order number {args['order_number']} now names order {order.number}, not {given_to}; nothing was "
                "refunded. Ask the customer which order they mean, and give its number exactly as written."
            )
        person = not _agent_still_has_the_ticket(ctx)
        # Read with the ticket's row held (as a person's take-over is): a customer message in flight
        # lands first and is seen, or comes after this refund is submitted. Never sent before, it is
        # not sent on a go-ahead the customer wrote after (maybe "please cancel the refund"): staff's
        # approval, or the agent's decision on words read before (no Confirm of theirs came after).
        wrote = not person and existing is None and customer_wrote_since_the_go_ahead(call, asks_the_customer=True)
        if person or wrote:
            pass  # nothing is written: handled below, outside this transaction
        elif (
            existing is None
            and not reviewed
            and (late := _review_asked_since(ctx, order) or _unknown_at_the_provider(order, key, listed))
        ):
            raise ToolNeedsApproval(late)  # nothing written, nothing sent: the run pauses on it
        elif existing is None and reviewed and (late := _held_since_the_approval(call, order, key, listed)):
            raise ToolNeedsApproval(late)  # handed back to staff, with the reason: nothing written, nothing sent
        elif existing is None:
            refund = Refund.objects.create(
                ticket=ctx.ticket,
                order=order,
                tool_call=ctx.call,
                idempotency_key=key,
                amount_cents=amount,
                currency=currency,
                reason=args.get("reason", ""),
                created_at=database_now(),  # the per-customer window is measured on it, by every host
            )
        else:
            refund = existing
        if not person and not wrote:
            _set_status(refund, RefundStatus.SUBMITTED, attempts=refund.attempts + 1)
    if person:
        _stop_for_a_person(existing)
    if wrote:
        raise CustomerWroteSince(f"refund {key}: the customer wrote after it was decided; not sent")
    # Committed: the provider may now act under the key; a crash from here on is reconciled.
    metadata = {"ticket_id": str(ctx.ticket.pk), "order_number": order.number, "tool_call_id": str(ctx.call.pk)}
    # Sent now without the payment's refunds at the provider read for it: decided on the ledger alone
    # (none of the reads before the transaction answered), or tried again (after a crash, or a provider
    # out of reach, the first try maybe never made: money refunded in its dashboard meanwhile). The look-up
    # under the key reads them: what it shows decides (``_held_back_for_money_at_the_provider``), until
    # this pass sends it.
    unread = listed is None
    if faults.armed("skip_idempotency_key"):  # a drill breaking the money path on purpose
        key = f"{key}-{uuid.uuid4().hex[:8]}"
    try:
        for attempt in _retrying():
            with attempt:
                # What happened under the key? Asked before the first try too: the key may have been
                # used before (a bundle written before the deployment it came from paid it, a try long
                # ago), and the provider forgets a key after 24 hours (Stripe): sent again, a forgotten
                # key pays a second time. The refund found is recorded, not sent again.
                # The first try of a refund nobody reviewed looks through the payment's refunds just read
                # (``listed``), unless the provider may have forgotten the key: then it asks again now.
                forgotten = _key_may_be_forgotten(call)
                first = attempt.retry_state.attempt_number == 1 and not forgotten
                if unread:
                    # The look-up under the key reads the payment's refunds: what it reads is not passed over.
                    read = _read_payment_refunds(key, order.payment_reference, must_answer=forgotten)
                    found = None if read is None else refund_under_key(read, key)
                    if read is not None:
                        unread = False
                        if found is None:
                            _held_back_for_money_at_the_provider(
                                ctx, call, refund, args, read, reviewed=reviewed, tried_before=existing is not None
                            )
                else:
                    found = _lookup(
                        key, order.payment_reference, must_answer=forgotten, listed=listed if first else None
                    )
                if found is None:
                    again = attempt.retry_state.attempt_number > 1
                    if (settled := _send_or_stop(ctx, refund, again=again)) is not None:
                        return settled  # settled while this worker was away: not sent
                    unread = False  # sent (or maybe): from here on it is settled under its key
                    found = provider().create_refund(
                        payment_reference=order.payment_reference,
                        amount_cents=amount,
                        currency=currency,
                        idempotency_key=key,
                        metadata=metadata,
                    )
                    faults.hit("after_provider_refund")  # the provider has it; our ledger does not yet
                return _outcome(refund, found)
    except ProviderUncertain as exc:
        if isinstance(exc, WAIT_AND_ASK_AGAIN) and patience_seconds() and not _key_may_be_forgotten(call):
            # The provider out of reach (refused, reset, timed out), still working on a request under the
            # key (its 409: a try that timed out, the provider finishing it after our timeout; a dead
            # worker's request), or asking us to slow down (429, nothing done): an outage, not this
            # refund's problem. Given up on, the customer read that it could not be confirmed, while the
            # provider paid it a moment later or would have taken it on the next try.
            # It stays submitted under its key and the run tries it again with the outage's backoff
            # (agents.outage), asking the provider first what happened under the key, so it is paid once
            # when the provider is back; past AGENT_OUTAGE_PATIENCE_SECONDS the run is parked and the
            # reconciler settles it. (Each try moves its time on: the reconciler leaves it to the run.)
            raise
        settled = _give_up(refund, RefundStatus.UNCERTAIN, f"no answer from the payment provider: {exc}")
        if settled is None:
            raise ToolEscalation(
                f"The payment provider did not confirm the refund after {int(settings.REFUND_PROVIDER_ATTEMPTS)} "
                f"tries; it is being reconciled and will not be repeated blindly ({exc}).",
                customer_text=_customer_text(refund, RefundTold.UNCONFIRMED),
                uncertain=True,
                settled=functools.partial(_paid_since_given_up, refund),
                told=functools.partial(_told_by_another, refund, RefundTold.UNCONFIRMED),
            ) from None
        return _settled_meanwhile(refund, settled)
    except (ProviderDeclined, ProviderError) as exc:
        settled = _give_up(refund, RefundStatus.FAILED, f"the payment provider refused the refund: {exc}")
        if settled is None:
            raise ToolEscalation(
                f"The payment provider refused the refund: {exc}",
                customer_text=_customer_text(refund, RefundTold.FAILED),
                settled=functools.partial(_paid_since_given_up, refund),
                told=functools.partial(_told_by_another, refund, RefundTold.FAILED),
            ) from None
        return _settled_meanwhile(refund, settled)
    raise AssertionError("unreachable: the retry loop returns or raises")  # pragma: no cover


def _review_asked_since(ctx: ToolContext, order: Order) -> str | None:
    """A review staff turned on while this unreviewed refund waited to be paid (behind another
    call's approval, or for the customer's Confirm): the customer flagged "every refund reviewed".
    Asked next to the payment, before the first try (a later try carries on under its key: the
    first may have reached the provider). A refund on the order declined meanwhile does not count:
    it was asked for after this one, whose card showed this one as pending when staff said no."""
    if Customer.objects.filter(pk=ctx.ticket.customer_id, requires_refund_approval=True).exists():
        return "every refund for this customer is reviewed by staff (flagged while this refund waited)"
    return None


def _payment_refunds(ctx: ToolContext, args: dict[str, Any]) -> list[ProviderRefund] | None:
    """The refunds the provider holds on the payment of the order this refund names, or None when that
    cannot be read now (no such order of the customer's: the guardrails say why; no answer from the
    provider: the ledger decides alone, as the look-up under the key then does). Read as a refund is
    sent, with its retries and backoff: one failed read (a 5xx, a dropped connection) is not "no
    answer", and taken as one it let a refund the provider's record holds for staff be paid unreviewed,
    the provider answering the look-up under the key a moment later."""
    try:
        order = customer_order(ctx.ticket, args["order_number"])
    except ToolError:
        return None
    if not order.payment_reference:
        return None
    try:
        for attempt in _retrying():
            with attempt:
                return provider().list_refunds(payment_reference=order.payment_reference)
    except ProviderError:
        logger.warning("could not list the refunds of order %s at the provider", order.number, exc_info=True)
        return None
    raise AssertionError("unreachable: the retry loop returns or raises")  # pragma: no cover


def refunds_outside_the_ledger(order: Order, key: str, listed: list[ProviderRefund]) -> list[ProviderRefund]:
    """The refunds of ``listed`` (the payment's, at the provider) the ledger does not count: money refunded
    (or being refunded) on this order's payment under no key of a refund of ours that counts (made in the
    provider's dashboard, by the deployment a ticket was moved from, or one of ours the ledger holds as
    failed), besides the refund under ``key`` itself."""
    # Ours on this payment, whichever order names it (one payment may pay for several orders).
    # Those failed unseen too: the ledger counts them as what may still be paid (``failed_unseen_cents``).
    ours = set(
        Refund.objects.filter(Q(status__in=RESERVING_REFUND_STATUSES) | failed_unseen())
        .filter(order__payment_reference=order.payment_reference)
        .values_list("idempotency_key", flat=True)
    )
    return [
        found
        for found in listed
        if found.status not in PROVIDER_FAILED
        and found.payment_reference == order.payment_reference
        and found.idempotency_key != key
        and found.idempotency_key not in ours
    ]


def provider_refunds_outside_the_ledger(order: Order, key: str) -> list[ProviderRefund] | None:
    """``refunds_outside_the_ledger``, read from the provider now (None when it does not answer). What a
    refund's approval card shows staff; call it outside any transaction (a request to the provider)."""
    if not order.payment_reference:
        return []
    try:
        listed = provider().list_refunds(payment_reference=order.payment_reference)
    except ProviderError:
        logger.warning("could not list the refunds of order %s at the provider", order.number, exc_info=True)
        return None
    return refunds_outside_the_ledger(order, key, listed)


def _held_at_the_provider(order: Order, refunds: list[ProviderRefund]) -> str:
    amount = format_money(sum(found.amount_cents for found in refunds), order.currency)
    ids = ", ".join(found.id for found in refunds)
    return (
        f"the payment provider holds {amount} refunded on order {order.number} that this ledger does not have "
        f"({ids}: made outside the agent, in the provider's dashboard or another deployment)"
    )


def _unknown_at_the_provider(order: Order, key: str, listed: list[ProviderRefund] | None) -> str | None:
    """Money the provider holds on this order's payment that the ledger does not count
    (``refunds_outside_the_ledger``): the customer may have been paid for this request already, so it needs
    a staff approval. Caller: the refund's transaction, with the order held (a refund of ours sent meanwhile
    has its row, committed before it was sent)."""
    unknown = refunds_outside_the_ledger(order, key, listed) if listed else []
    if not unknown:
        return None
    return f"{_held_at_the_provider(order, unknown)}: the customer may have been refunded for this already"


def _held_since_the_approval(call: ToolCall, order: Order, key: str, listed: list[ProviderRefund] | None) -> str | None:
    """An approved refund about to be first sent: money the provider holds on the payment outside the ledger
    that the approval's card did not show (refunded in the dashboard since the request was made, or the card
    showed the provider unread). Staff approved without knowing, so it goes back to them, with the reason.
    Caller: the refund's transaction, with the order held. A provider that does not answer now leaves the
    approval to decide, as the ledger does for an unreviewed refund."""
    seen = set(call.approval_provider_seen or [])
    new = [found for found in refunds_outside_the_ledger(order, key, listed or []) if found.id not in seen]
    if not new:
        return None
    shown = "since the request was made" if call.approval_provider_seen is not None else "which its card did not show"
    return (
        f"not sent after the approval: {_held_at_the_provider(order, new)}, {shown}: the customer may have "
        "been refunded for this already"
    )


def _go_ahead_given_to_another_order(call: ToolCall, ctx: ToolContext, args: dict[str, Any], order: Order) -> str:
    """The order staff's approval, the customer's Confirm or the agent's own decision (no approval
    needed, judged when the intent was recorded: ``refund_precheck``) was given to, when the model's
    number names another one now (""): the number is read in any case, and an order numbered exactly
    as the model wrote it, added since the card, the question or the decision named another, is the
    one it names. Nobody judged a refund on that one (it may be in another currency, refunded before,
    declined before: each a review). Caller: the refund's transaction, the guardrails passed, before
    its first send."""
    approved = call.approval_decision == ApprovalDecision.APPROVED
    if approved and call.approval_order_number not in {"", order.number}:
        return f"order {call.approval_order_number} on which staff approved this refund"
    confirmed = call.confirmation_decision == ConfirmationDecision.CONFIRMED and call.confirmation_text
    if confirmed and refund_question(ctx, args) != call.confirmation_text:
        return f"the order the customer confirmed this refund for (they were asked: {call.confirmation_text})"
    if not approved and call.approval_order_number not in {"", order.number}:
        return f"order {call.approval_order_number} on which this refund was decided (no staff approval needed there)"
    return ""


def _read_payment_refunds(key: str, payment_reference: str, *, must_answer: bool) -> list[ProviderRefund] | None:
    """The payment's refunds at the provider, read as the look-up under ``key`` (``_lookup``) reads them:
    None when the provider does not answer, unless ``must_answer`` (then ProviderUncertain: not sent
    without asking)."""
    try:
        read = provider().list_refunds(payment_reference=payment_reference)
        refund_under_key(read, key)  # two refunds under one key: no answer to go on, as in ``_lookup``
        return read
    except ProviderError as exc:
        _look_up_unanswered(exc, key, must_answer=must_answer)
        return None


def _look_up_unanswered(exc: ProviderError, key: str, *, must_answer: bool) -> None:
    """A look-up under ``key`` got no answer (called while ``exc`` is handled): logged; and when it
    ``must_answer`` (the key may be one the provider has forgotten), ProviderUncertain: not sent."""
    logger.warning("could not look up refund %s at the provider", key, exc_info=True)
    if must_answer:
        raise ProviderUncertain(
            f"could not ask the payment provider what happened under a key it may have forgotten ({exc}); "
            "not sent without asking"
        ) from exc


def _held_back_for_money_at_the_provider(
    ctx: ToolContext,
    call: ToolCall,
    refund: Refund,
    args: dict[str, Any],
    read: list[ProviderRefund],
    *,
    reviewed: bool,
    tried_before: bool,
) -> None:
    """A refund about to be sent with nothing under its key at the provider, decided without the payment's
    refunds there read (``read``, just now): decided on the ledger alone (no read before its transaction
    answered), or tried before (a crash, a provider out of reach: maybe never sent, and money may have
    been refunded in the provider's dashboard since). Money the provider holds on the payment outside the
    ledger decides as the read before its first send does: the call is refused (more than the payment has
    left, as the provider counts it) or goes to staff (nobody reviewed it, or its card did not show that
    money). It is not sent. A refund never tried is taken back (its row never left the ledger); one tried
    before is failed unseen, asked about again by the reconciler while a try may still land
    (``refund_recheck_failed``), and counted against the order meanwhile. Otherwise returns: it is sent."""
    key = refund.idempotency_key
    if not refunds_outside_the_ledger(refund.order, key, read):
        return
    refused: ToolError | None = None
    late: str | None = None
    with ctx.fenced():
        locked = Refund.objects.select_for_update().get(pk=refund.pk)
        if locked.status != RefundStatus.SUBMITTED or locked.provider_refund_id:
            return  # settled meanwhile (the reconciler found it): left to its key
        try:
            order, _, _ = _check_guardrails(ctx, args, key, order=refund.order, listed=read)
        except ToolError as exc:
            refused = exc
        else:
            if reviewed:
                late = _held_since_the_approval(call, order, key, read)
            else:
                late = _unknown_at_the_provider(order, key, read)
        if refused is None and late is None:
            return
        if tried_before:
            _set_status(locked, RefundStatus.FAILED, error=f"not sent again: {refused or late}"[:2000])
        else:
            locked.delete()  # a crash after this leaves the call to run again, read afresh (``reconcile_call``)
    if refused is not None:
        raise refused
    raise ToolNeedsApproval(f"{late} (read as the refund was about to be sent)")


def _agent_still_has_the_ticket(ctx: ToolContext) -> bool:
    """Caller: inside ``ctx.fenced()``. Holds the ticket's row until commit: a take-over in flight lands
    first and is seen; one that comes later waits for this transaction."""
    ticket_services.ticket_hold(ctx.ticket.pk)
    return not person_took_the_ticket_since(AgentRun(pk=ctx.call.run_id, ticket_id=ctx.ticket.pk))


def _send_or_stop(ctx: ToolContext, refund: Refund, *, again: bool) -> dict[str, Any] | None:
    """Right before a try sends the refund: is it still this pass's to send? None if so: the lease
    still ours (the fence) and the row still submitted; sent ``again`` (a later try), the ticket still
    the agent's too (a backoff is long enough for a take-over). Else the call's result (paid
    meanwhile), or it stops. A worker away between its commit and its request (frozen, its sessions
    cut by the database, its lease run out) may find the refund settled by the reconciler, which found
    the ticket free and nothing under the key: failed, the customer told it could not be completed and
    a person asked to check it with the provider. Sent then, it was paid behind all of them."""
    with ctx.fenced():
        status = Refund.objects.select_for_update().values_list("status", flat=True).get(pk=refund.pk)
        still = not again or _agent_still_has_the_ticket(ctx)
    if status != RefundStatus.SUBMITTED:
        refund.refresh_from_db()
        return _settled_meanwhile(refund, status)
    if not still:
        _stop_for_a_person(refund)
    return None


def _stop_for_a_person(refund: Refund | None) -> NoReturn:
    """A person took the ticket before this refund was sent, or sent again. One that may have
    reached the provider already is left uncertain for the reconciler (the provider's record
    wins); one that never did is not sent."""
    if refund is None or refund.status in {RefundStatus.REQUESTED, RefundStatus.FAILED}:
        raise ToolStopped(f"{NOT_RUN}: {PERSON_TOOK_OVER}")
    _give_up(
        refund,
        RefundStatus.UNCERTAIN,
        "not tried again: a person took the ticket over; an earlier attempt may have reached the "
        "payment provider, and the reconciler asks it under the key",
    )
    raise ToolStopped(
        "not tried again: a person took the ticket over; an earlier attempt may have reached the payment "
        "provider (being reconciled)",
        uncertain=True,
    )


def _outcome(refund: Refund, found: ProviderRefund) -> dict[str, Any]:
    status = _record_provider_state(refund, found)
    if status == RefundStatus.FAILED:
        _mark_escalated(refund)
        raise ToolEscalation(
            f"The payment provider reports the refund {found.status} ({found.id}).",
            customer_text=_customer_text(refund, RefundTold.FAILED),
            told=functools.partial(_told_by_another, refund, RefundTold.FAILED),
        )
    return _result(refund)


def _give_up(refund: Refund, status: str, error: str) -> str | None:
    """Record that this worker gives up on the refund, unless it was settled meanwhile: None if it
    gave up, else the status the refund was settled to. Decided on the row as it is now, under the
    lock the reconciler's write takes: a refund it settled between the last try and here is not
    given up on again (``_settled_meanwhile``)."""
    with transaction.atomic():
        locked = Refund.objects.select_for_update().get(pk=refund.pk)
        gives_up = locked.status in {RefundStatus.SUBMITTED, RefundStatus.UNCERTAIN, RefundStatus.REQUESTED}
        if gives_up:
            _set_status(locked, status, error=error[:2000], escalated_at=timezone.now())
    refund.refresh_from_db()
    if gives_up:
        faults.hit("after_refund_given_up")  # the customer is not told yet (``_paid_since_given_up``)
    return None if gives_up else refund.status


def _paid_since_given_up(refund: Refund) -> dict[str, Any] | None:
    """Asked in the transaction that would tell the customer a refund this worker gave up on was not
    confirmed (or refused), under the refund's lock, which the reconciler's write takes: one it found
    paid (or paying) since is the call's result, and the customer is told nothing else. Then nobody
    was told it failed: a later failure at the provider is told afresh (``refund_escalate``)."""
    locked = Refund.objects.select_for_update().get(pk=refund.pk)
    if locked.status not in PAID_OR_PAYING:
        return None
    Refund.objects.filter(pk=locked.pk).update(escalated_at=None)
    refund.refresh_from_db()
    return _result(refund)


def _told_by_another(refund: Refund, outcome: str) -> bool:
    """Asked by the run that gave up on this refund, in the transaction that tells the customer its
    escalation (``ToolEscalation.told``): has the reconciler told them this outcome already? True, and
    they are not told twice. Else the run tells them now, in this transaction, and the move is recorded
    told (``_told``): a reconciler that comes later says nothing more about it. Takes the refund's lock,
    which every telling takes: whichever comes second says nothing more."""
    locked = Refund.objects.select_for_update().get(pk=refund.pk)
    if locked.told == outcome:
        return True
    _told(locked, outcome)
    return False


def _settled_meanwhile(refund: Refund, status: str) -> dict[str, Any]:
    """A refund the reconciler settled while this worker was giving up on it, as it is: paid (or
    paying), the call's result, not a failure for a person to check (who might refund it again);
    failed, the reconciler has told the customer and handed the ticket to a person, so the customer
    is not told a second time (``GIVEN_UP``: the model says a person is looking into it)."""
    if status in PAID_OR_PAYING:
        return _result(refund)
    raise ToolError(GIVEN_UP)


def _mark_escalated(refund: Refund) -> None:
    Refund.objects.filter(pk=refund.pk, escalated_at__isnull=True).update(escalated_at=timezone.now())


def _lookup(
    key: str, payment_reference: str, *, must_answer: bool = False, listed: list[ProviderRefund] | None = None
) -> ProviderRefund | None:
    """The refund the provider holds under ``key``, or None. A look-up that gets no answer is None too,
    unless ``must_answer`` (the key may be one the provider has forgotten): then ProviderUncertain, and
    nothing is sent before a look-up answers (the try is made again, with the backoff). ``listed``: the
    payment's refunds, read from the provider just now (``_payment_refunds``), looked through instead."""
    try:
        if listed is not None:
            return refund_under_key(listed, key)
        return provider().find_refund(idempotency_key=key, payment_reference=payment_reference)
    except ProviderError as exc:
        _look_up_unanswered(exc, key, must_answer=must_answer)
        return None


# How long the payment provider keeps an idempotency key (Stripe: 24 hours from its first use), less a
# margin for the clocks: within it, a refund sent again under its key is deduplicated by the provider.
PROVIDER_KEEPS_KEYS = timedelta(hours=23)


def _key_may_be_forgotten(call: ToolCall) -> bool:
    """May the provider have forgotten this call's key? Made with the call's intent, the key is first
    used after it: not within ``PROVIDER_KEEPS_KEYS`` of it. Past that (a bundle restored a day after
    the old deployment paid it, a try a day after the last), a refund sent under the key is a new one."""
    return timezone.now() - call.started_at >= PROVIDER_KEEPS_KEYS


def reconcile_call(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any] | None:
    """Recovery hook: what happened under this call's key? None means: run it again under the same key."""
    refund = Refund.objects.select_related("order").filter(idempotency_key=ctx.call.idempotency_key).first()
    if refund is None:
        return None  # the intent never reached the provider
    if refund.status in PAID_OR_PAYING:
        return _result(refund)
    found = _lookup(refund.idempotency_key, refund.order.payment_reference)
    if found is not None and _record_provider_state(refund, found) != RefundStatus.FAILED:
        return _result(refund)
    # Nothing at the provider, or a failed refund: running the handler again under the
    # same key either refunds once or meets the same failure and hands the ticket over.
    return None


@dataclass
class ReconcileRound:
    """One round of the reconciler over the refunds it settles. A provider that does not answer at
    all (refused, reset, timed out) is asked once a round, not once a refund: a provider that hangs
    held the round for a timeout per open refund (and an outage leaves a refund open for every one
    tried during it), past the next round's tick, so rounds ran side by side on the workers the
    tickets need. The refunds after it are settled as that one was: each goes to a person once past the
    bound, and is asked again next round."""

    unreachable: ProviderUnreachable | None = None

    def find(self, refund: Refund) -> ProviderRefund | None:
        if self.unreachable is not None:
            raise ProviderUnreachable(str(self.unreachable))
        try:
            return provider().find_refund(
                idempotency_key=refund.idempotency_key, payment_reference=refund.order.payment_reference
            )
        except ProviderUnreachable as exc:
            self.unreachable = exc
            raise


def refund_reconcile(
    *,
    refund: Refund,
    older_than_seconds: int | None = None,
    by: AbstractBaseUser | None = None,
    this_round: ReconcileRound | None = None,
) -> str:
    """Settle an open refund (submitted, pending, uncertain) from the provider's records.

    Returns its status after. A refund that fails, or that the provider has no
    record of past the bound, goes to a person and the customer is told once.
    """
    if refund.status not in OPEN_REFUND_STATUSES:
        return refund.status
    bound = settings.REFUND_UNCERTAIN_AFTER_SECONDS if older_than_seconds is None else older_than_seconds
    age = (database_now() - refund.updated_at).total_seconds()  # on the clock the refund's writer used
    try:
        found = (this_round or ReconcileRound()).find(refund)
    except ProviderError as exc:
        # Decided on the row as it is now: a round reads its refunds once, and one that stood still (a
        # frozen worker's, or one behind a slow provider) may come to a refund settled or tried since.
        refund.refresh_from_db()
        if refund.status in OPEN_REFUND_STATUSES and (database_now() - refund.updated_at).total_seconds() >= bound:
            refund_escalate(refund=refund, reason=f"the payment provider could not be asked about it: {exc}", by=by)
        return refund.status
    if found is not None:
        # The move and its telling in one transaction: a reconciler that dies between the two leaves
        # neither, and the next round records and tells it (recorded alone, a failure left the open
        # refunds and was never told).
        with transaction.atomic():
            status = _record_provider_state(refund, found, by=by)
            # Pending for long: counted from when it became pending (just now, for one found pending
            # after it was given up on, and told so).
            pending_for = (database_now() - refund.updated_at).total_seconds()
            if status == RefundStatus.FAILED:
                refund_escalate(refund=refund, reason=f"the payment provider reports it {found.status}", by=by)
            elif status == RefundStatus.PENDING and pending_for >= bound:
                refund_escalate(refund=refund, reason=f"the payment provider still reports it {found.status}", by=by)
        return status
    if age < bound or ticket_lease_held(refund.ticket_id):
        # A request may still be in flight: a worker holds the ticket (one paused past the bound still
        # holds its session's lock, and its request may land yet). It is asked again next time.
        return refund.status
    with transaction.atomic():
        # Decided on the rows as they are now, in the order a worker's refund step takes them (refund,
        # then ticket): a worker that took the ticket and tried the refund again since it was read
        # (its status or its time moved on, or it holds the lease now) is left to finish it.
        locked = Refund.objects.select_for_update().get(pk=refund.pk)
        ticket_services.ticket_hold(locked.ticket_id)
        moved_on = locked.status not in OPEN_REFUND_STATUSES or locked.updated_at != refund.updated_at
        if moved_on or ticket_lease_held(locked.ticket_id):
            refund.refresh_from_db()
            return refund.status
        _set_status(locked, RefundStatus.FAILED, error="The provider has no refund under this key.")
        ticket_services.event_append(
            ticket=locked.ticket_id,
            kind="refund_reconciled",
            **_staff_or(by, actor_kind=ActorKind.SYSTEM),
            payload={"refund_id": locked.pk, "status": RefundStatus.FAILED},
        )
        # In the same transaction: a worker that takes the ticket after it finds a person has it, and
        # never tries the refund again after the customer was told it could not be confirmed.
        refund_escalate(refund=locked, reason="the payment provider has no refund under its key", by=by)
    refund.refresh_from_db()
    return RefundStatus.FAILED


def refund_escalate(*, refund: Refund, reason: str, by: AbstractBaseUser | None = None) -> None:
    """A refund that failed or stays unknown: the customer and staff are told, a person takes the ticket.
    Once per episode (``refund_tell``): the reconciler asks again every tick while the provider is away
    (each time with its latest error), and a refund whose last told outcome is this one has nothing new
    to say; a person who has handed the ticket back is not handed it again every minute. A refund that
    moved since (found pending after it failed, then failed again) is a new episode, told again.
    Caller: any; inside the transaction that records the move when there is one (``refund_reconcile``)."""
    with transaction.atomic():
        locked = Refund.objects.select_for_update().select_related("order").get(pk=refund.pk)
        if locked.status == RefundStatus.SUCCEEDED:
            # Paid since whoever escalates read it (a worker's answer, another round): nothing to tell.
            refund.refresh_from_db()
            return
        outcome = RefundTold.FAILED if locked.status == RefundStatus.FAILED else RefundTold.UNCONFIRMED
        if not refund_tell(
            refund=locked,
            outcome=outcome,
            staff=f"{reason}. Check it with the payment provider before refunding again.",
        ):
            return
        if locked.escalated_at is None:
            locked.escalated_at = timezone.now()
            locked.save(update_fields=["escalated_at"])
        ticket_services.event_append(
            ticket=locked.ticket_id,
            kind="refund_escalated",
            **_staff_or(by, actor_kind=ActorKind.SYSTEM),
            payload={"refund_id": locked.pk, "status": locked.status, "reason": reason},
        )
        ticket_services.ticket_hand_to_person(
            ticket=locked.ticket_id, reason=f"refund {locked.status}: {reason}", **_staff_or(by)
        )
    refund.refresh_from_db()


def refund_recheck_failed(*, refund: Refund, this_round: ReconcileRound | None = None) -> str:
    """A refund failed without the provider ever showing it (no record under its key, or refused):
    asked again, for as long as the provider keeps idempotency keys. If the provider shows it after
    all (a request that was still on its way), the ledger takes it in: the money counts against the
    order again, and the ticket's timeline says it was paid."""
    try:
        found = (this_round or ReconcileRound()).find(refund)
    except ProviderError:
        logger.warning("could not look up refund %s at the provider", refund.idempotency_key, exc_info=True)
        return refund.status
    if found is None or found.status in PROVIDER_FAILED:
        return refund.status
    return _record_provider_state(refund, found)


def _failed_unseen_recently() -> QuerySet[Refund]:
    return Refund.objects.filter(failed_unseen())


def tickets_with_money_in_flight() -> QuerySet[Any]:
    """Tickets whose money is not settled yet: a refund requested, submitted, pending or uncertain, or
    one failed unseen that is still asked about. A move must carry them (state.export), finished or
    not: the reconciler settles them where they land."""
    moving = Refund.objects.filter(status__in=[RefundStatus.REQUESTED, *OPEN_REFUND_STATUSES]).values("ticket_id")
    return moving.union(_failed_unseen_recently().values("ticket_id"))


def reconcile_open_refunds(*, older_than_seconds: int | None = None) -> dict[str, int]:
    """Reconcile every refund left submitted, pending or uncertain, and ask again about those that
    failed unseen in the last REFUND_RECHECK_FAILED_HOURS. Used by beat and a management command.

    One round at a time: a round holds a session-level advisory lock, and a tick that finds it held
    returns at once. A round whose worker was frozen (SIGSTOP, a paused VM) keeps its session, and
    the lock, for as long as it is frozen, with no transaction open for the idle-in-transaction
    timeout to end: so a lock held by a session idle for REFUND_RECONCILE_STALLED_SECONDS is passed
    over, and the round goes on under the next of the lock's slots. (A round is safe beside another:
    each refund is decided under its row's lock; the lock only keeps a slow provider from holding
    several workers.)"""
    with connection.cursor() as cursor:
        for slot in range(RECONCILE_SLOTS):
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [RECONCILE_LOCK + slot])
            if cursor.fetchone()[0]:
                break
            if not _round_stalled(cursor, slot):
                return {}  # a round is under way (a slow provider): this tick holds no second worker
            logger.warning("the reconciler's round in slot %s has stood still for a while: going on past it", slot)
        else:
            return {}
    try:
        return _reconcile_round(older_than_seconds=older_than_seconds)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [RECONCILE_LOCK + slot])


# Rounds of the reconciler run one at a time: a session-level advisory lock, let go when the round
# ends or its worker's session does. (Not in the namespace of the tickets' leases, agents.lease.) Its
# key is RECONCILE_LOCK + slot, for the slots passed over when their rounds stand still.
RECONCILE_LOCK = (0x5A9F << 32) + 1
RECONCILE_SLOTS = 8


def _round_stalled(cursor: Any, slot: int) -> bool:
    """Is the round in ``slot`` held by a session that has been idle, outside any transaction, for
    REFUND_RECONCILE_STALLED_SECONDS (its worker frozen between two statements)?"""
    cursor.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND l.classid = %s AND l.objid = %s "
        "AND a.state = 'idle' AND a.state_change < now() - make_interval(secs => %s))",
        [RECONCILE_LOCK >> 32, (RECONCILE_LOCK + slot) & 0xFFFFFFFF, settings.REFUND_RECONCILE_STALLED_SECONDS],
    )
    return bool(cursor.fetchone()[0])


def _reconcile_round(*, older_than_seconds: int | None) -> dict[str, int]:
    counts: dict[str, int] = {}
    this_round, isolated = ReconcileRound(), rounds.Round("reconciler")
    for refund in Refund.objects.select_related("order").filter(status__in=OPEN_REFUND_STATUSES).order_by("pk"):
        with isolated.row(f"refund {refund.pk}"):
            status = refund_reconcile(refund=refund, older_than_seconds=older_than_seconds, this_round=this_round)
            counts[status] = counts.get(status, 0) + 1
    for refund in _failed_unseen_recently().select_related("order").order_by("pk"):
        with isolated.row(f"refund {refund.pk}"):
            status = refund_recheck_failed(refund=refund, this_round=this_round)
            if status != RefundStatus.FAILED:
                counts[status] = counts.get(status, 0) + 1
    if isolated.failed:
        counts["errors"] = isolated.failed
    return counts


register(
    Tool(
        name="issue_refund",
        description=(
            "Refund all or part of one of the customer's orders to the original payment method. "
            "Amount in the currency's minor unit (cents). Refunds may wait for a staff approval."
        ),
        parameters={
            "type": "object",
            "properties": {
                "order_number": {"type": "string", "minLength": 1, "maxLength": 32},
                "amount_cents": {"type": "integer", "minimum": 1, "maximum": MAX_REFUND_CENTS},
                "currency": {"type": "string", "pattern": "^[A-Za-z]{3}$"},
                "reason": {"type": "string", "maxLength": 500},
            },
            "required": ["order_number", "amount_cents"],
            "additionalProperties": False,
        },
        replay_policy=ReplayPolicy.KEYED,
        handler=issue_refund,
        reconcile=reconcile_call,
        precheck=refund_precheck,
        needs_approval=refund_approval_reason,
        confirm_question=refund_question,
        public_label="Working on your refund",
    )
)
