"""Refunds: the ``issue_refund`` tool, its guardrails, its ledger and reconciliation.

Business rules are enforced here, in code, each time the refund executes
(also after an approval wait), never trusted to the prompt:

- the order belongs to the ticket's customer;
- the order is in a refundable state;
- the currency is the order's;
- the amount is positive and at most what remains refundable, counting every
  refund that has happened or may have happened (uncertain ones included).

The provider call carries the tool call's idempotency key; after a crash or an
ambiguous error we look the refund up at the provider by that key before
doing anything else.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from agents import faults
from agents.models import REFUND_TRANSITIONS, RESERVING_REFUND_STATUSES, Refund, RefundStatus, ReplayPolicy
from agents.tools import Tool, ToolContext, ToolError, ToolUncertain, customer_order, register
from payments.provider import (
    IdempotencyMismatch,
    PaymentProvider,
    ProviderDeclined,
    ProviderError,
    ProviderRefund,
    ProviderUncertain,
)
from tickets import services as ticket_services
from tickets.models import REFUNDABLE_ORDER_STATUSES, ActorKind, Order, OrderStatus

logger = logging.getLogger(__name__)

# How many times one execution retries the provider under the same key after an
# answer that proved nothing happened (an error before the provider committed).
SAME_KEY_RETRIES = 2

_provider: PaymentProvider | None = None


def provider() -> PaymentProvider:
    global _provider
    if _provider is None:
        _provider = PaymentProvider()
    return _provider


def refunded_total_cents(order: Order, *, exclude_key: str | None = None) -> int:
    refunds = Refund.objects.filter(order=order, status__in=RESERVING_REFUND_STATUSES)
    if exclude_key:
        refunds = refunds.exclude(idempotency_key=exclude_key)
    return int(refunds.aggregate(total=Sum("amount_cents"))["total"] or 0)


def _check_guardrails(ctx: ToolContext, args: dict[str, Any], key: str) -> tuple[Order, int, str]:
    """Raise ToolError with a reason the model can explain, or return (locked order, amount, currency)."""
    order = customer_order(ctx.ticket, args["order_number"])
    order = Order.objects.select_for_update().get(pk=order.pk)  # serialises refunds of one order
    if order.status not in REFUNDABLE_ORDER_STATUSES:
        raise ToolError(f"Order {order.number} is {order.status}; only paid, shipped or delivered orders are refunded.")
    if not order.payment_reference:
        raise ToolError(f"Order {order.number} has no payment to refund.")
    currency = (args.get("currency") or order.currency).lower()
    if currency != order.currency:
        raise ToolError(f"Order {order.number} was paid in {order.currency.upper()}, not {currency.upper()}.")
    amount = int(args["amount_cents"])
    if amount <= 0:
        raise ToolError("A refund amount must be positive.")
    remaining = order.total_cents - refunded_total_cents(order, exclude_key=key)
    if amount > remaining:
        raise ToolError(
            f"Order {order.number} has {remaining / 100:.2f} {order.currency.upper()} left to refund; "
            f"{amount / 100:.2f} is more than that."
        )
    return order, amount, currency


def _set_status(refund: Refund, status: str, **fields: Any) -> None:
    if status != refund.status and status not in REFUND_TRANSITIONS[refund.status]:
        raise ValueError(f"refund {refund.pk} cannot go from {refund.status} to {status}")
    refund.status = status
    refund.updated_at = timezone.now()
    for name, value in fields.items():
        setattr(refund, name, value)
    refund.save(update_fields=["status", "updated_at", *fields])


def _result(refund: Refund) -> dict[str, Any]:
    return {
        "status": refund.status,
        "refund_id": refund.provider_refund_id,
        "order_number": refund.order.number,
        "amount_cents": refund.amount_cents,
        "currency": refund.currency,
    }


def _record_success(refund: Refund, found: ProviderRefund) -> dict[str, Any]:
    with transaction.atomic():
        locked = Refund.objects.select_for_update().select_related("order").get(pk=refund.pk)
        if locked.status != RefundStatus.SUCCEEDED:
            _set_status(locked, RefundStatus.SUCCEEDED, provider_refund_id=found.id, error="")
            order = Order.objects.select_for_update().get(pk=locked.order_id)
            if refunded_total_cents(order) >= order.total_cents and order.status != OrderStatus.REFUNDED:
                order.status = OrderStatus.REFUNDED
                order.save(update_fields=["status"])
            ticket_services.event_append(
                ticket=locked.ticket_id,
                kind="refund_succeeded",
                actor_kind=ActorKind.AGENT,
                actor_ref=f"run:{locked.tool_call.run_id}",
                payload={
                    "refund_id": locked.pk,
                    "provider_refund_id": found.id,
                    "order": order.number,
                    "amount_cents": locked.amount_cents,
                    "currency": locked.currency,
                    "label": f"Refund of {locked.amount_cents / 100:.2f} {locked.currency.upper()} issued",
                },
                is_public=True,
            )
    return _result(locked)


def issue_refund(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """The tool's effect. Keyed: safe to call again with the same call (same key)."""
    key = ctx.call.idempotency_key
    with transaction.atomic():
        existing = Refund.objects.select_for_update().filter(idempotency_key=key).first()
        if existing is not None and existing.status == RefundStatus.SUCCEEDED:
            return _result(existing)
        order, amount, currency = _check_guardrails(ctx, args, key)
        if existing is None:
            refund = Refund.objects.create(
                ticket=ctx.ticket,
                order=order,
                tool_call=ctx.call,
                idempotency_key=key,
                amount_cents=amount,
                currency=currency,
                reason=args.get("reason", ""),
            )
        else:
            refund = existing
        _set_status(refund, RefundStatus.SUBMITTED, attempts=refund.attempts + 1)
    # Committed: the provider may now act under the key; a crash from here on is reconciled.
    metadata = {
        "ticket_id": str(ctx.ticket.pk),
        "order_number": order.number,
        "tool_call_id": str(ctx.call.pk),
    }
    last_error = ""
    for _ in range(1 + SAME_KEY_RETRIES):
        try:
            found = provider().create_refund(
                payment_reference=order.payment_reference,
                amount_cents=amount,
                currency=currency,
                idempotency_key=key,
                metadata=metadata,
            )
            faults.hit("after_provider_refund")  # the provider has it; our ledger does not yet
            return _record_success(refund, found)
        except (ProviderDeclined, IdempotencyMismatch) as exc:
            with transaction.atomic():
                _set_status(refund, RefundStatus.FAILED, error=str(exc))
            raise ToolError(f"The payment provider refused the refund: {exc}") from None
        except ProviderUncertain as exc:
            last_error = str(exc)
            found = _lookup(key, order.payment_reference)
            if found is not None:
                return _record_success(refund, found)
            # The provider has no refund under this key: nothing happened; retry with the same key.
            continue
    with transaction.atomic():
        _set_status(refund, RefundStatus.UNCERTAIN, error=last_error)
    raise ToolUncertain(
        "The payment provider did not confirm the refund; it is being checked and will not be repeated blindly."
    )


def _lookup(key: str, payment_reference: str) -> ProviderRefund | None:
    try:
        return provider().find_refund(idempotency_key=key, payment_reference=payment_reference)
    except ProviderError:
        logger.warning("could not look up refund %s at the provider", key, exc_info=True)
        return None


def reconcile_call(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any] | None:
    """Recovery hook: what happened under this call's key? None means nothing did; run it again."""
    refund = Refund.objects.select_related("order").filter(idempotency_key=ctx.call.idempotency_key).first()
    if refund is None:
        return None  # the intent never reached the provider
    if refund.status == RefundStatus.SUCCEEDED:
        return _result(refund)
    found = _lookup(refund.idempotency_key, refund.order.payment_reference)
    if found is not None:
        return _record_success(refund, found)
    return None


def refund_reconcile(*, refund: Refund, older_than_seconds: int = 120) -> str:
    """Settle an uncertain or submitted refund from the provider's records. Returns its status after."""
    if refund.status not in {RefundStatus.SUBMITTED, RefundStatus.UNCERTAIN}:
        return refund.status
    try:
        found = provider().find_refund(
            idempotency_key=refund.idempotency_key, payment_reference=refund.order.payment_reference
        )
    except ProviderError:
        return refund.status
    if found is not None:
        return _record_success(refund, found)["status"]
    age = (timezone.now() - refund.updated_at).total_seconds()
    if age < older_than_seconds:
        return refund.status  # a request may still be in flight
    with transaction.atomic():
        locked = Refund.objects.select_for_update().get(pk=refund.pk)
        if locked.status in {RefundStatus.SUBMITTED, RefundStatus.UNCERTAIN}:
            _set_status(locked, RefundStatus.FAILED, error="The provider has no refund under this key.")
            ticket_services.event_append(
                ticket=locked.ticket_id,
                kind="refund_reconciled",
                actor_kind=ActorKind.SYSTEM,
                payload={"refund_id": locked.pk, "status": RefundStatus.FAILED},
            )
    return RefundStatus.FAILED


def reconcile_open_refunds(*, older_than_seconds: int = 120) -> dict[str, int]:
    """Reconcile every refund left submitted or uncertain. Used by beat and a management command."""
    counts: dict[str, int] = {}
    pending = Refund.objects.select_related("order").filter(status__in=[RefundStatus.SUBMITTED, RefundStatus.UNCERTAIN])
    for refund in pending:
        status = refund_reconcile(refund=refund, older_than_seconds=older_than_seconds)
        counts[status] = counts.get(status, 0) + 1
    return counts


register(
    Tool(
        name="issue_refund",
        description=(
            "Refund all or part of one of the customer's orders to the original payment method. "
            "Amount in the currency's minor unit (cents)."
        ),
        parameters={
            "type": "object",
            "properties": {
                "order_number": {"type": "string", "minLength": 1, "maxLength": 32},
                "amount_cents": {"type": "integer", "minimum": 1},
                "currency": {"type": "string", "pattern": "^[A-Za-z]{3}$"},
                "reason": {"type": "string", "maxLength": 500},
            },
            "required": ["order_number", "amount_cents"],
            "additionalProperties": False,
        },
        replay_policy=ReplayPolicy.KEYED,
        handler=issue_refund,
        reconcile=reconcile_call,
        public_label="Working on your refund",
    )
)
