"""Which agent calls need a staff approval. Read at the moment the call would run."""

from __future__ import annotations

import dataclasses
from typing import Any

from agents.tools import REGISTRY, ApprovalPredicate, Tool, ToolContext
from approvals.models import ApprovalPolicy, ToolApprovalRule
from tickets.models import Customer


def refund_needs_approval(ctx: ToolContext, args: dict[str, Any]) -> str | None:
    policy = ApprovalPolicy.current()
    customer = Customer.objects.get(pk=ctx.ticket.customer_id)
    if customer.requires_refund_approval:
        return "every refund for this customer is reviewed by staff"
    amount = int(args.get("amount_cents", 0))
    if amount > policy.refund_threshold_cents:
        return f"refunds above {policy.refund_threshold_cents / 100:.2f} need a staff approval"
    return None


def _with_rules(tool: Tool, specific: ApprovalPredicate | None) -> ApprovalPredicate:
    def needs_approval(ctx: ToolContext, args: dict[str, Any]) -> str | None:
        if ToolApprovalRule.objects.filter(tool_name=tool.name, requires_approval=True).exists():
            return f"every {tool.name} call needs a staff approval"
        return specific(ctx, args) if specific is not None else None

    return needs_approval


def install() -> None:
    """Give every registered tool its approval predicate (per-tool rules, plus the refund rules)."""
    for name, tool in list(REGISTRY.items()):
        specific = refund_needs_approval if name == "issue_refund" else None
        REGISTRY[name] = dataclasses.replace(tool, needs_approval=_with_rules(tool, specific))
