"""support.rows: held updates write what is in memory, and find their rows through the primary key
whatever the table's size was when the statement was prepared.

The hot path's statements are prepared once per connection and the server keeps a generic plan for
them. A plan made while a table was small (a new deployment, a fresh database) would otherwise scan
the whole table on every step for as long as the connection lives.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.utils import timezone
from psycopg import sql as psycopg_sql

from support import rows
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Message

pytestmark = pytest.mark.django_db


def _generic_plan(sql: str, params: list) -> str:
    """The plan the server keeps for ``sql`` once prepared (as psycopg does for a repeated statement)."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE held_update AS {_numbered(sql)}")
        try:
            values = psycopg_sql.SQL(", ").join(map(psycopg_sql.Literal, params)).as_string(connection.connection)
            cursor.execute(f"EXPLAIN EXECUTE held_update({values})")
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("DEALLOCATE held_update")


def _numbered(sql: str) -> str:
    """``%s`` placeholders as ``$1``, ``$2``... (a server-side PREPARE)."""
    parts = sql.split("%s")
    return "".join(part + (f"${n}" if n < len(parts) else "") for n, part in enumerate(parts, start=1))


def _messages(n: int) -> list[Message]:
    customer = make_customer("rows")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="rows", body="first")
    for i in range(n - 1):
        ticket_services.message_post(ticket=ticket.pk, author_kind="customer", author_user=customer.user, body=f"m{i}")
    return list(Message.objects.filter(ticket=ticket).order_by("pk"))


@pytest.mark.parametrize("how_many", [1, 3])
def test_held_updates_write_the_values_in_memory(how_many):
    messages = _messages(how_many)
    for n, message in enumerate(messages):
        message.body = f"changed {n}"
    with transaction.atomic(), rows.write_behind():
        rows.update(messages, ["body"])
        assert rows.holds_writes_to_any()
    assert [m.body for m in Message.objects.filter(pk__in=[m.pk for m in messages]).order_by("pk")] == [
        f"changed {n}" for n in range(how_many)
    ]


def test_a_held_update_of_one_row_finds_it_by_its_key_in_a_plan_made_while_the_table_was_empty():
    sql, params = rows._update_cte([Message(pk=1, ticket_id=1, body="changed")], ["body"])
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE tickets_message CASCADE")  # a new table: no pages, no statistics
        plan = _generic_plan(sql, params)
    assert "Index Scan using tickets_message_pkey" in plan, plan
    assert "Seq Scan on tickets_message" not in plan, plan


def _fields(obj) -> dict:
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


def test_new_makes_the_instance_the_model_would_make():
    """rows.new skips Model.__init__ on the hot path: it must make the very same unsaved row (every
    default, callable ones called afresh, a relation given as an object cached as __init__ caches it)."""
    from agents.models import ToolCall
    from tickets.models import TicketEvent

    customer = make_customer("rows-new")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="rows", body="first")
    values = {
        "ticket": ticket,
        "kind": "note",
        "actor_kind": "staff",
        "actor_user": customer.user,
        "payload": {"a": 1},
        "created_at": timezone.now(),
    }
    made, expected = rows.new(TicketEvent, **values), TicketEvent(**values)
    assert _fields(made) == _fields(expected)
    assert made.ticket is ticket and made.actor_user is customer.user and made._state.adding
    now = timezone.now()
    by_attname = rows.new(
        TicketEvent, ticket_id=ticket.pk, kind="note", actor_kind="agent", actor_user=None, created_at=now
    )
    assert _fields(by_attname) == _fields(
        TicketEvent(ticket_id=ticket.pk, kind="note", actor_kind="agent", created_at=now)
    )
    first, second = rows.new(ToolCall, ticket_id=ticket.pk), rows.new(ToolCall, ticket_id=ticket.pk)
    clock = ToolCall._meta.get_field("started_at").attname
    assert {k: v for k, v in _fields(first).items() if k != clock} == {
        k: v for k, v in _fields(ToolCall(ticket_id=ticket.pk)).items() if k != clock
    }
    assert first.arguments is not second.arguments  # a callable default is called for each row


def test_new_refuses_what_init_would_refuse_and_models_with_init_receivers():
    from django.db.models import signals

    from tickets.models import TicketEvent

    with pytest.raises(TypeError, match="kindd"):
        rows.new(TicketEvent, kindd="note")

    def receiver(**kwargs):
        pass

    signals.post_init.connect(receiver, sender=Message)
    try:
        rows._blank.cache_clear()
        with pytest.raises(NotImplementedError, match="init receivers"):
            rows.new(Message, body="x")
    finally:
        signals.post_init.disconnect(receiver, sender=Message)
        rows._blank.cache_clear()
