"""One transaction per step (DESIGN.md, invariant 16), counted, and the request each step sent,
rebuilt from the ledger.

Counts, not timings: the statements and commits a turn sends are the same on any machine.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

import psycopg
import pytest
from django.db import connection

from agents.conversation import request_of
from agents.models import CallStatus, ModelStep, ReplayPolicy, StepStatus, ToolCall
from agents.offline_model import OfflineDeterministicModel
from agents.profiles import active_profile
from agents.runner import advance
from support.rows import forget_key_blocks
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, TicketEvent

pytestmark = pytest.mark.django_db(transaction=True)


class RecordingModel:
    """The offline model, keeping a copy of every request it is sent."""

    def __init__(self) -> None:
        self.inner = OfflineDeterministicModel(token_delay_ms=0)
        self.name = self.inner.name
        self.requests: list[list[dict[str, Any]]] = []

    def complete(self, *, messages: list[dict[str, Any]], tools: list[Any], on_token: Any = None) -> Any:
        self.requests.append(copy.deepcopy(messages))
        return self.inner.complete(messages=messages, tools=tools, on_token=on_token)


class Counted:
    def __init__(self) -> None:
        self.statements: list[str] = []
        self.commits = 0
        self.sent: list[str] = []  # BEGIN and COMMIT as psycopg sends them to the server
        # What the pass's own connection ran through Django (the tools' statements, and the pass's
        # batched reads sent on the driver's connection directly, aside).
        self.through_django: list[str] = []

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        self.through_django.append(sql)
        return execute(sql, params, many, context)


def run_counted(ticket_id: int, model: Any) -> Counted:
    counted = Counted()
    commit = connection.commit

    def counting_commit() -> None:
        counted.commits += 1
        commit()

    exec_command = psycopg.Connection._exec_command

    def counting_exec_command(conn: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        word = (command if isinstance(command, bytes) else str(command).encode()).split(b" ")[0].decode()
        if word in {"BEGIN", "COMMIT"}:
            counted.sent.append(word)
        return exec_command(conn, command, *args, **kwargs)

    # Every statement the turn sends, on any connection: the tools' run on a thread of their own
    # (agents.tool_thread), with its connection. Not the lease heartbeat's, which has its own rhythm.
    execute = psycopg.Cursor.execute

    def counting_execute(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name != "lease-heartbeat":
            counted.statements.append(str(query))
        return execute(cursor, query, *args, **kwargs)

    connection.commit = counting_commit
    psycopg.Connection._exec_command = counting_exec_command
    psycopg.Cursor.execute = counting_execute
    try:
        with connection.execute_wrapper(counted):
            advance(ticket_id, model=model)
    finally:
        del connection.commit
        psycopg.Connection._exec_command = exec_command
        psycopg.Cursor.execute = execute
    return counted


def test_a_21_step_turn_commits_once_per_model_step_and_stays_under_100_statements():
    customer = make_customer()
    make_order(customer, number="A-7101")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Bench", body="bench:10")
    active_profile()  # the first profile version is made once per database, not per turn

    counted = run_counted(ticket.pk, RecordingModel())

    steps = ModelStep.objects.filter(ticket=ticket)
    calls = ToolCall.objects.filter(ticket=ticket)
    assert steps.count() == 11 and all(s.status == StepStatus.COMPLETED for s in steps)
    assert calls.count() == 10 and not calls.exclude(status=CallStatus.SUCCEEDED).exists()
    side_effecting = calls.exclude(replay_policy=ReplayPolicy.SAFE).count()
    # One commit per model step (its outcome, the intents it asks for, the results of the safe calls
    # before it, its events, the fence), one per side-effecting call, one to take the message in.
    assert counted.commits <= steps.count() + side_effecting + 1, counted.commits
    assert len(counted.statements) <= 100, len(counted.statements)
    # A plain step's rows are all held: its one statement goes out as the whole transaction, with no
    # BEGIN and no COMMIT. Those are sent for taking the message in, for the reply, and when this
    # process takes a new block of keys (a read inside the step's transaction).
    assert counted.sent.count("BEGIN") <= 4, counted.sent
    # Every call's outcome is in the ledger with its events, though none committed on its own.
    finished = TicketEvent.objects.filter(ticket=ticket, kind="tool_call_finished").count()
    assert finished == 10
    seqs = list(TicketEvent.objects.filter(ticket=ticket).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))


def test_each_step_stores_only_its_new_messages_and_the_whole_request_is_rebuilt_from_the_ledger():
    customer = make_customer()
    make_order(customer, number="A-7102")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body="Where is my order A-7102?")
    model = RecordingModel()
    advance(ticket.pk, model=model)
    ticket_services.message_post(
        ticket=ticket, author_kind=AuthorKind.CUSTOMER, author_user=customer.user, body="bench:3"
    )
    advance(ticket.pk, model=model)

    steps = list(ModelStep.objects.filter(ticket=ticket).order_by("run_id", "index", "attempt"))
    assert len(steps) == len(model.requests) == 2 + 4
    for step, sent in zip(steps, model.requests, strict=True):
        assert request_of(step) == sent
    # A pass's first step stores the whole request; the steps after it only what is new.
    first_of_second_turn = steps[2]
    assert first_of_second_turn.request_prefix_id is None
    assert all(s.request_prefix_id == prev.pk for prev, s in zip(steps[2:], steps[3:], strict=False))
    assert all(len(s.request_messages) == 2 for s in steps[3:])  # the step's call and its result
    stored = sum(len(s.request_messages) for s in steps)
    assert stored < sum(len(r) for r in model.requests)
    assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).count() == 2


def test_a_turn_no_one_else_writes_on_asks_nothing_of_the_ledger_between_its_steps():
    """Whether a person wrote to the customer, or took the ticket, since the pass read it is asked
    of the ledger only once someone else has written on the ticket's timeline; each of the pass's
    own commits tells it so, at no cost. A turn no one else writes on sends none of those reads:
    about one statement per step (11 steps here), not two."""
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Bench", body="bench:10")
    active_profile()
    # Steps and calls take their keys from blocks this process reserved ahead, and a step that takes a
    # new block sends it as a read of its own and its rows in two statements, not one. Where in the turn
    # the blocks run out depends on the tests this process ran before (two running out in two steps
    # made 18). Dropped here, the turn takes both blocks in its first steps, whatever ran before.
    forget_key_blocks()

    counted = run_counted(ticket.pk, RecordingModel())

    asked = [
        sql for sql in counted.through_django
        if "tickets_ticketevent" in sql.split("INSERT", 1)[0] or ('"author_kind" =' in sql and "SELECT" in sql[:20])
    ]  # fmt: skip
    assert asked == [], asked
    # The loop's own statements (the tools' reads of orders and articles aside).
    loop = [sql for sql in counted.through_django if "tickets_helparticle" not in sql and "tickets_order" not in sql]
    blocks = [sql for sql in loop if "FROM generate_series" in sql]
    assert len(blocks) == 2, blocks
    # One per step; the others: the lease and the pass's reads, the run's start, the answer's lock of
    # the ticket, the release. (The answer's step, reply and run end are one.)
    assert len(loop) - len(blocks) <= 11 + 4, (len(loop), loop)
