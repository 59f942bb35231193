"""The model's input, rebuilt from the ledger alone (DESIGN.md, invariant 12).

Every public message on the ticket and every tool call with its result, in the
order the ticket's timeline recorded them, whichever turn they belong to. The
agent's own reply to an earlier message is there even when it was stored after
a later customer message. Customer messages not yet taken into a turn are left
for the turn that answers them, and read where it took them in: one written
while a run was under way comes after what that run did and answered without it
(with the note that told the customer it waits). A step's tool calls and their
results stay together, as the chat-completions format requires, at the point
where the step completed.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agents.models import AgentRun, CallStatus, ModelStep, StepStatus, ToolCall
from agents.profiles import profile_of
from support import reads
from tickets.attachments import size_words
from tickets.models import Attachment, AuthorKind, Message, Ticket

DEFAULT_SYSTEM_PROMPT = """You are the customer-support agent of an online shop that sells kitchen goods.
Be brief, warm and precise. Use the tools to look up orders and help articles instead of guessing.
Refunds: only for the customer's own orders, never more than what remains refundable; the system
checks this and may ask a member of staff to approve. Never refund an order twice for one request:
read the conversation for refunds already made. If you cannot help, hand off to a human.
Tools count money in cents; write amounts to the customer as the tools spell them ("$49.99").
Your final message (with no tool call) is posted to the customer."""

# How the line that tells the model of an attached file begins (``customer_text``).
ATTACHED_LINE = "[attached: "
# How a non-customer public message reads to the model.
_PREFIX = {AuthorKind.AGENT: "", AuthorKind.STAFF: "[staff] ", AuthorKind.SYSTEM: "[automatic notice] "}


def system_message(ticket: Ticket, prompt: str = "") -> dict[str, Any]:
    """The instructions: the run's profile version's prompt, or the built-in one, then the line naming
    the customer and the ticket (``_CUSTOMER_LINE`` reads it back)."""
    prompt = prompt or DEFAULT_SYSTEM_PROMPT
    return {
        "role": "system",
        "content": f"{prompt}\nCustomer: {ticket.customer.name}. Ticket #{ticket.pk}: {ticket.subject}.",
    }


_CUSTOMER_LINE = re.compile(r"\nCustomer: (?P<name>[^\n]*?)\. Ticket #\d+: ")


def customer_named(instructions: str) -> str | None:
    """The customer's name as ``system_message`` wrote it into ``instructions`` (the name they had then)."""
    found = list(_CUSTOMER_LINE.finditer(instructions))
    return found[-1].group("name") if found else None


def step_block(step: ModelStep, calls: dict[tuple[int, int], ToolCall]) -> list[dict[str, Any]]:
    """A step that asked for tools, as the model reads it: its message, then each call's result."""
    block: list[dict[str, Any]] = [assistant_message(step)]
    for index, requested in enumerate(step.tool_calls):
        block.append(tool_message(requested, calls.get((step.pk, index))))
    return block


def assistant_message(step: ModelStep) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": step.response_text or "",
        "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in step.tool_calls
        ],
    }


def tool_message(requested: dict[str, Any], call: ToolCall | None) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": requested["id"], "content": json.dumps(call_view(call))}


def build_conversation(
    run: AgentRun,
    *,
    ticket: Ticket | None = None,
    steps: list[ModelStep] | None = None,
    calls: list[ToolCall] | None = None,
    message_rows: list[tuple[Any, ...]] | None = None,
) -> list[dict[str, Any]]:
    """The whole conversation from the ledger. ``ticket`` (with its customer), and the ticket's
    ``steps`` and ``calls``, may be passed when the caller has read them already."""
    if ticket is None:
        ticket = Ticket.objects.select_related("customer").get(pk=run.ticket_id)
    if calls is None:
        calls = list(ToolCall.objects.filter(ticket=ticket))
    if steps is None:
        steps = list(ModelStep.objects.filter(ticket=ticket, status=StepStatus.COMPLETED).exclude(tool_calls=[]))
    by_position = {(c.step_id, c.index): c for c in calls}
    # A tool posts under tool:<its call's key> (bare, by the agent, before keys had their namespace).
    posted_by_tools = {f"tool:{c.idempotency_key}" for c in calls} | {c.idempotency_key for c in calls}
    placed: list[tuple[tuple[int, ...], list[dict[str, Any]]]] = []
    messages, files = _conversation_messages(ticket.pk, message_rows)
    # "We got your message, it waits for the decision" (waiting:<message>) comes in with its message:
    # a customer message no turn has taken in yet is not read, and nor is the note that answers it.
    taken_in = {f"waiting:{m.pk}": seq for m, seq in messages if m.author_kind == AuthorKind.CUSTOMER}
    for message, seq in messages:
        if message.author_kind == AuthorKind.AGENT and message.client_msg_id in posted_by_tools:
            continue  # posted by a tool call: the call and its result already say so (never a person's)
        if (
            message.author_kind == AuthorKind.SYSTEM
            and (message.client_msg_id or "").startswith("waiting:")
            and message.client_msg_id not in taken_in
        ):
            continue
        if message.author_kind == AuthorKind.SYSTEM and message.client_msg_id in taken_in:
            seq = max(seq or 0, taken_in[message.client_msg_id] or 0)  # read right after its message
        if message.author_kind == AuthorKind.CUSTOMER:
            entry = {"role": "user", "content": customer_text(message, files.get(message.pk, []))}
        else:
            entry = {"role": "assistant", "content": _PREFIX.get(message.author_kind, "") + message.body}
        placed.append(((seq or 0, 0, message.pk), [entry]))

    for step in steps:
        if step.status != StepStatus.COMPLETED or not step.tool_calls:
            continue
        position = step.ticket_seq if step.ticket_seq is not None else 0
        placed.append(((position, 1, step.run_id, step.index), step_block(step, by_position)))

    conversation: list[dict[str, Any]] = [system_message(ticket, profile_of(run).system_prompt)]
    for _, entries in sorted(placed, key=lambda item: item[0]):
        conversation.extend(entries)
    for note in run.recovery_notes:
        conversation.append({"role": "system", "content": note["text"]})
    return conversation


def customer_text(message: Message, attachments: list[Attachment] | None = None) -> str:
    """A customer's message as the model reads it: the text, then one line per attached file
    (the model is told a file exists, its name, type and size; it does not see the file).
    ``attachments``: the message's files, when the caller has read them."""
    lines = [message.body]
    for attachment in message.attachments.all() if attachments is None else attachments:
        lines.append(
            f"{ATTACHED_LINE}{attachment.original_name} ({attachment.content_type}, {size_words(attachment.size)})]"
        )
    return "\n".join(lines)


def conversation_messages_query(ticket_id: int) -> tuple[str, list[Any]]:
    """The ticket's public messages the model reads (not customer messages no turn has taken in
    yet), each with its position and whether it has files.

    A message's position is its "message" event on the timeline; a customer's, where a turn first
    took it in (its run's start), if later: one written while a run was under way is read by the next
    turn, after what the run did and answered without it. Placed where it was written, the next turn
    read the earlier run's calls and answer as done for it, and said that answer again (the crash
    drill's "repeats the reply before it")."""
    return (
        f"SELECT {reads.columns_of(Message)}, "
        "GREATEST((SELECT e.seq FROM tickets_ticketevent e WHERE e.ticket_id = tickets_message.ticket_id "
        "AND e.kind = 'message' AND (e.payload ->> 'message_id')::bigint = tickets_message.id "
        "ORDER BY e.seq LIMIT 1), "
        "(SELECT min(r.seq) FROM tickets_ticketevent r WHERE tickets_message.author_kind = %s "
        "AND r.ticket_id = tickets_message.ticket_id AND r.kind = 'agent_run_started' "
        "AND r.payload -> 'messages' @> to_jsonb(tickets_message.id))), "
        "EXISTS (SELECT 1 FROM tickets_attachment a WHERE a.message_id = tickets_message.id) "
        "FROM tickets_message WHERE tickets_message.ticket_id = %s AND tickets_message.is_public "
        "AND NOT (tickets_message.author_kind = %s AND tickets_message.agent_handled_at IS NULL)",
        [AuthorKind.CUSTOMER, ticket_id, AuthorKind.CUSTOMER],
    )


def _conversation_messages(
    ticket_id: int, rows: list[tuple[Any, ...]] | None = None
) -> tuple[list[tuple[Message, int | None]], dict[int, list[Attachment]]]:
    """The messages of ``conversation_messages_query`` (``rows``, or read now) with their
    positions, and their files (read only when some message has files)."""
    if rows is None:
        rows = reads.fetch(*conversation_messages_query(ticket_id))
    messages = reads.instances(Message, rows)
    files: dict[int, list[Attachment]] = {}
    with_files = [message.pk for message, row in zip(messages, rows, strict=True) if row[-1]]
    if with_files:
        for attachment in Attachment.objects.filter(message_id__in=with_files).order_by("message_id", "position"):
            files.setdefault(attachment.message_id, []).append(attachment)
    return [(message, row[-2]) for message, row in zip(messages, rows, strict=True)], files


def request_of(step: ModelStep) -> list[dict[str, Any]]:
    """The whole request a step sent to the model, rebuilt from the ledger: the request of
    its prefix step (recursively), then the messages the step stored."""
    parts: list[list[dict[str, Any]]] = []
    current: ModelStep | None = step
    while current is not None:
        parts.append(current.request_messages)
        current = (
            ModelStep.objects.only("request_messages", "request_prefix").get(pk=current.request_prefix_id)
            if current.request_prefix_id
            else None
        )
    return [message for part in reversed(parts) for message in part]


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
    if call.status == CallStatus.AWAITING_CONFIRMATION:
        return {"status": "awaiting_customer_confirmation", "note": "waiting for the customer to confirm"}
    if call.status == CallStatus.CANCELLED:
        return {"cancelled": True, **(call.result or {}), "note": "not done: the customer did not confirm it"}
    if call.status == CallStatus.STARTED:
        return {"status": "started", "note": "not finished yet"}
    return {"error": call.error or "failed", **(call.result or {})}
