"""What one pass of the loop knows about its run: read once from Postgres, then kept in
step with what the pass itself writes (DESIGN.md, the loop).

A pass reads the ticket's steps and calls once (two statements), builds the
conversation from them once, and from then on appends to it in memory: the
step it stores, the results of the calls it runs. Each step stores only the
messages that are new since the request of the step before it in the same pass
(``ModelStep.request_prefix``), so a turn writes each message once; the whole
request stays rebuildable from the ledger (``agents.conversation.request_of``).

Anything this pass did not write itself (a recovery, a staff decision applied,
a pause) makes the pass read the ledger again (``reload``) instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from agents import calls
from agents.conversation import assistant_message, build_conversation, conversation_messages_query, tool_message
from agents.lease import Lease
from agents.models import AgentRun, ModelStep, StepStatus, ToolCall
from agents.profiles import PolicyValues, enabled_tools, policy_values, profile_of, tools_always_approved
from support import reads
from tickets.models import Ticket, TicketStatus

# A step's answer streams under an id made of where the step sits, known before the step is
# stored: run, index and attempt. Ids grow with each, so a browser knows a newer stream.
_INDEX_BITS, _ATTEMPT_BITS = 10, 10


def stream_id(run_id: int, index: int, attempt: int) -> int:
    return (run_id << (_INDEX_BITS + _ATTEMPT_BITS)) | (min(index, 1023) << _ATTEMPT_BITS) | min(attempt, 1023)


def stream_position(stream: int) -> tuple[int, int, int]:
    """(run id, step index, attempt) of a stream id."""
    mask = (1 << _ATTEMPT_BITS) - 1
    return stream >> (_INDEX_BITS + _ATTEMPT_BITS), (stream >> _ATTEMPT_BITS) & mask, stream & mask


def _last_hand_back_sql(ticket_id: int) -> tuple[str, list[Any]]:
    """The timeline number of the last time a person handed the ticket back to the agent (NULL if
    never): the steps stored before it spent the budget of an earlier stretch, which a person
    ended by taking the ticket and chose to give the agent again."""
    return (
        "SELECT max(seq) FROM tickets_ticketevent WHERE ticket_id = %s AND kind = 'status_changed' "
        "AND payload->>'from' = %s AND payload->>'to' = %s",
        [ticket_id, TicketStatus.WITH_HUMAN.value, TicketStatus.OPEN.value],
    )


@dataclass
class Pass:
    lease: Lease
    ticket: Ticket
    run: AgentRun
    # Every step row of the ticket (all runs, all statuses) and every call, as read or written.
    steps: list[ModelStep] = field(default_factory=list)
    calls: dict[tuple[int, int], ToolCall] = field(default_factory=dict)
    # Tools every call of which needs a staff approval (ToolApprovalRule), read once per pass.
    approval_rules: frozenset[str] = frozenset()
    # What the run's pinned profile version allows: the tools, and the approval policy's values.
    enabled_tools: frozenset[str] = frozenset()
    policy: PolicyValues | None = None
    # Tokens of the ticket's other runs since a person last handed it back to the agent (this run's
    # are summed from its steps): the budget is the agent's for each stretch it has the ticket.
    other_runs_tokens: int = 0
    conversation: list[dict[str, Any]] = field(default_factory=list)
    # The last step of this pass whose request is a prefix of the conversation, and that request's length.
    prefix_step: ModelStep | None = None
    prefix_length: int = 0
    # Safe calls run in memory whose outcomes commit with the next step (DESIGN.md, invariant 17).
    unsaved_outcomes: list[ToolCall] = field(default_factory=list)
    # The errors every call of the step just stored was refused with, as asked (no such tool, arguments
    # not a JSON object the tool takes; ``agents.execution.record_intents``); [] when any call stood.
    refused_as_asked: list[str] = field(default_factory=list)
    # Steps of this pass in a row whose every call was refused as asked.
    refused_in_a_row: int = 0
    # Whether a customer message was waiting when this pass posted its reply (None: no reply posted).
    customer_waiting: bool | None = None
    # This pass took the run over from a worker that stopped and counted it a failure (recovery):
    # the first step or call it gets done is the progress that shows the stop was the worker's.
    counted_a_stop: bool = False
    # Why the run stops, when that stop was the last one the limit allows (recovery parks the run).
    stop_limit: str | None = None
    # When the conversation was read, and the ticket's timeline number then (read just before the
    # messages): a person's reply numbered after it is in no request of this pass until it reads again.
    read_at: datetime | None = None
    read_seq: int | None = None

    @classmethod
    def load(cls, lease: Lease, ticket: Ticket, run: AgentRun) -> Pass:
        state = cls(lease=lease, ticket=ticket, run=run)
        state.reload()
        return state

    def reload(self) -> None:
        """Read the run's ledger again and rebuild the conversation from it."""
        ticket_id = self.ticket.pk
        self.read_at = timezone.now()
        hand_back, hand_back_params = _last_hand_back_sql(ticket_id)
        seq, steps, calls, messages = reads.fetch_together(
            [
                (
                    f"SELECT last_event_seq, ({hand_back}) FROM tickets_ticket WHERE id = %s",
                    [*hand_back_params, ticket_id],
                ),
                reads.select_sql(ModelStep, "ticket_id = %s", [ticket_id], tail='ORDER BY run_id, "index", attempt'),
                reads.select_sql(ToolCall, "ticket_id = %s", [ticket_id]),
                conversation_messages_query(ticket_id),
            ]
        )  # one round trip; the timeline's number first, so every message it counts is in what follows
        self.read_seq = seq[0][0] if seq else None
        self.steps = reads.instances(ModelStep, steps)
        self.calls = {(c.step_id, c.index): c for c in reads.instances(ToolCall, calls)}
        profile = profile_of(self.run)
        self.approval_rules = tools_always_approved(profile)
        self.enabled_tools = enabled_tools(profile)
        self.policy = policy_values(profile)
        since = (seq[0][1] if seq else None) or 0
        self.other_runs_tokens = sum(
            s.prompt_tokens + s.completion_tokens + s.wasted_tokens
            for s in self.steps
            if s.run_id != self.run.pk and (s.ticket_seq or 0) >= since
        )
        self.unsaved_outcomes = []
        self.rebuild_conversation(messages=messages)

    def rebuild_conversation(self, *, messages: list[tuple[Any, ...]] | None = None) -> None:
        """``messages``: the rows of ``conversation_messages_query``, when read already."""
        self.conversation = build_conversation(
            self.run,
            ticket=self.ticket,
            steps=[s for s in self.steps if s.status == StepStatus.COMPLETED and s.tool_calls],
            calls=list(self.calls.values()),
            message_rows=messages,
        )
        self.prefix_step, self.prefix_length = None, 0

    # --- reads ------------------------------------------------------------------------------

    @property
    def run_steps(self) -> list[ModelStep]:
        run_id = self.run.pk
        return [s for s in self.steps if s.run_id == run_id]

    def last_completed(self) -> ModelStep | None:
        done = [s for s in self.run_steps if s.status == StepStatus.COMPLETED]
        return max(done, key=lambda s: s.index) if done else None

    def next_index(self) -> int:
        last = self.last_completed()
        return 0 if last is None else last.index + 1

    def attempts_at(self, index: int) -> int:
        return sum(1 for s in self.run_steps if s.index == index)

    def calls_of(self, step: ModelStep) -> list[ToolCall]:
        return [self.calls[(step.pk, i)] for i in range(len(step.tool_calls)) if (step.pk, i) in self.calls]

    def run_tokens(self) -> tuple[int, int, int]:
        steps = self.run_steps
        return (
            sum(s.prompt_tokens for s in steps),
            sum(s.completion_tokens for s in steps),
            sum(s.wasted_tokens for s in steps),
        )

    def tokens_used(self) -> int:
        return self.other_runs_tokens + sum(self.run_tokens())

    # --- keeping up with what this pass writes ----------------------------------------------

    def request_delta(self) -> tuple[ModelStep | None, list[dict[str, Any]]]:
        """The next request as (prefix step, messages after the prefix's request)."""
        return self.prefix_step, self.conversation[self.prefix_length :]

    def step_stored(self, step: ModelStep) -> None:
        self.steps.append(step)
        if step.status == StepStatus.COMPLETED:
            self.prefix_step, self.prefix_length = step, len(self.conversation)
            if step.tool_calls:
                self.conversation.append(assistant_message(step))

    def flush_outcomes(self) -> None:
        """Commit the outcomes of safe calls kept in memory (before any other write that follows them)."""
        if self.unsaved_outcomes:
            with self.lease.guard():
                self.save_outcomes()

    def save_outcomes(self) -> None:
        """Caller: inside a fenced transaction (the next step's)."""
        outcomes, self.unsaved_outcomes = self.unsaved_outcomes, []
        calls.calls_record_outcomes(lease=self.lease, calls=outcomes)

    def call_stored(self, call: ToolCall) -> None:
        self.calls[(call.step_id, call.index)] = call

    def results_known(self, step: ModelStep) -> None:
        """All calls of ``step`` are final (or paused): the model reads their results next.

        A step read from the ledger (a run resumed after a pause) is in the conversation with its
        results as they were then: those are replaced where they stand, never repeated (a model
        refuses two results for one call, and a result must follow its call)."""
        ids = [requested["id"] for requested in step.tool_calls]
        start = self.prefix_length
        for at in range(len(self.conversation) - 1, self.prefix_length - 1, -1):
            entry = self.conversation[at]
            if entry.get("role") == "assistant" and [c["id"] for c in entry.get("tool_calls") or []] == ids:
                start = at
                break
        placed = {
            entry["tool_call_id"]: at
            for at, entry in enumerate(self.conversation[start:], start=start)
            if entry.get("role") == "tool"
        }
        for index, requested in enumerate(step.tool_calls):
            message = tool_message(requested, self.calls.get((step.pk, index)))
            if requested["id"] in placed:
                self.conversation[placed[requested["id"]]] = message
            else:
                self.conversation.append(message)
