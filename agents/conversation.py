"""The model's input, rebuilt from the ledger alone (DESIGN.md, invariant 12).

Every public message on the ticket and every tool call with its result, in the
order the ticket's timeline recorded them, whichever turn they belong to. The
agent's own reply to an earlier message is there even when it was stored after
a later customer message. Customer messages not yet taken into a turn are left
for the turn that answers them. A step's tool calls and their results stay
together, as the chat-completions format requires, at the point where the step
completed.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings

from agents.models import AgentRun, CallStatus, ModelStep, StepStatus, ToolCall
from tickets.models import AuthorKind, Message, Ticket, TicketEvent

DEFAULT_SYSTEM_PROMPT = """You are the customer-support agent of an online shop that sells kitchen goods.
Be brief, warm and precise. Use the tools to look up orders and help articles instead of guessing.
Refunds: only for the customer's own orders, never more than what remains refundable; the system
checks this and may ask a member of staff to approve. Never refund an order twice for one request:
read the conversation for refunds already made. If you cannot help, hand off to a human.
Your final message (with no tool call) is posted to the customer."""

# How a non-customer public message reads to the model.
_PREFIX = {AuthorKind.AGENT: "", AuthorKind.STAFF: "[staff] ", AuthorKind.SYSTEM: "[automatic notice] "}


def build_conversation(run: AgentRun) -> list[dict[str, Any]]:
    ticket = Ticket.objects.select_related("customer").get(pk=run.ticket_id)
    prompt = getattr(settings, "AGENT_SYSTEM_PROMPT", "") or DEFAULT_SYSTEM_PROMPT
    system = f"{prompt}\nCustomer: {ticket.customer.name}. Ticket #{ticket.pk}: {ticket.subject}."

    calls = {(c.step_id, c.index): c for c in ToolCall.objects.filter(ticket=ticket)}
    posted_by_tools = {c.idempotency_key for c in calls.values()}
    seq_of = dict(TicketEvent.objects.filter(ticket=ticket, kind="message").values_list("payload__message_id", "seq"))
    placed: list[tuple[tuple[int, ...], list[dict[str, Any]]]] = []
    messages = Message.objects.filter(ticket=ticket, is_public=True).exclude(
        author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True
    )
    for message in messages:
        if message.client_msg_id in posted_by_tools:
            continue  # posted by a tool call: the call and its result already say so
        if message.author_kind == AuthorKind.CUSTOMER:
            entry = {"role": "user", "content": message.body}
        else:
            entry = {"role": "assistant", "content": _PREFIX.get(message.author_kind, "") + message.body}
        placed.append(((seq_of.get(message.pk, 0), 0, message.pk), [entry]))

    steps = ModelStep.objects.filter(ticket=ticket, status=StepStatus.COMPLETED).exclude(tool_calls=[])
    for step in steps:
        block: list[dict[str, Any]] = [
            {
                "role": "assistant",
                "content": step.response_text or "",
                "tool_calls": [
                    {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in step.tool_calls
                ],
            }
        ]
        for index, requested in enumerate(step.tool_calls):
            view = call_view(calls.get((step.pk, index)))
            block.append({"role": "tool", "tool_call_id": requested["id"], "content": json.dumps(view)})
        position = step.ticket_seq if step.ticket_seq is not None else 0
        placed.append(((position, 1, step.run_id, step.index), block))

    conversation: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for _, entries in sorted(placed, key=lambda item: item[0]):
        conversation.extend(entries)
    for note in run.recovery_notes:
        conversation.append({"role": "system", "content": note["text"]})
    return conversation


def call_view(call: ToolCall | None) -> dict[str, Any]:
    """A call's result as the model reads it (words for the model, not for customers)."""
    if call is None:
        return {"error": "not run"}
    if call.status == CallStatus.SUCCEEDED:
        return call.result or {}
    if call.status == CallStatus.UNCERTAIN:
        return {"status": "uncertain", "error": "may or may not have taken effect; check before repeating"}
    if call.status == CallStatus.REJECTED:
        return {"rejected": True, "status": "rejected_by_staff", "note": call.approval_note or ""}
    if call.status == CallStatus.AWAITING_APPROVAL:
        return {"status": "awaiting_approval", "note": "waiting for a staff decision"}
    if call.status == CallStatus.STARTED:
        return {"status": "started", "note": "not finished yet"}
    return {"error": call.error or "failed", **(call.result or {})}
