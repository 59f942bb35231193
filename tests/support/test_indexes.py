"""Every index of our tables is written by every insert (and by every update of a column it holds):
one that another index already serves only costs each step of the agent loop. This reads the
indexes the migrations made, so a model field that adds one back (a foreign key's default index
beside a unique constraint that starts with it) fails here."""

import re

import pytest
from django.apps import apps
from django.db import connection

from agents.models import ToolCall

pytestmark = pytest.mark.django_db

OUR_APPS = ("tickets", "agents", "approvals", "staff")


def _indexes() -> dict[str, list[tuple[str, list[str], bool, bool]]]:
    """Per table of our apps: (index name, its columns in order, unique, partial). A column indexed
    for LIKE searches (Django's ``_like`` index beside a unique text column) is named with its
    operator class: the plain index does not serve those searches."""
    tables = [m._meta.db_table for app in OUR_APPS for m in apps.get_app_config(app).get_models()]
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT t.relname, i.relname, ix.indisunique, ix.indpred IS NOT NULL,
                   array(SELECT a.attname || CASE WHEN o.opcdefault THEN '' ELSE ' ' || o.opcname END
                         FROM unnest(ix.indkey, ix.indclass) WITH ORDINALITY k(attnum, opclass, n)
                         JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
                         JOIN pg_opclass o ON o.oid = k.opclass ORDER BY k.n)
            FROM pg_index ix JOIN pg_class t ON t.oid = ix.indrelid JOIN pg_class i ON i.oid = ix.indexrelid
            WHERE t.relname = ANY(%s)
            """,
            [tables],
        )
        found: dict[str, list[tuple[str, list[str], bool, bool]]] = {}
        for table, name, unique, partial, cols in cursor.fetchall():
            found.setdefault(table, []).append((name, list(cols), unique, partial))
    return found


def test_no_index_repeats_the_leading_columns_of_another():
    repeated = []
    for table, indexes in _indexes().items():
        for name, cols, unique, partial in indexes:
            if unique or partial:
                continue  # a unique index enforces a rule; a partial one serves rows the other may not
            for other, other_cols, _, other_partial in indexes:
                if other != name and not other_partial and other_cols[: len(cols)] == cols:
                    repeated.append(f"{table}.{name} {cols} is served by {other} {other_cols}")
    assert repeated == []


def test_the_loops_busiest_tables_carry_no_index_of_rows_they_rarely_look_up():
    """An event the agent writes is not in the index kept for events a person made."""
    indexes = {name: (cols, partial) for name, cols, _, partial in _indexes()["tickets_ticketevent"]}
    on_actor = [name for name, (cols, partial) in indexes.items() if "actor_user_id" in cols and not partial]
    assert on_actor == []


def test_no_index_of_tool_calls_holds_what_a_calls_outcome_writes():
    """A call's outcome (its status, result, error and end) is written by the next step: held in no
    index, not even in a partial index's condition, it updates the row in place (HOT) instead of adding
    an entry to each index of the table."""
    outcome = {ToolCall._meta.get_field(name).column for name in ("status", "result", "error", "finished_at")}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index "
            "WHERE indrelid = %s::regclass",
            [ToolCall._meta.db_table],
        )
        holding = [
            (name, column)
            for name, definition in cursor.fetchall()
            for column in sorted(outcome)
            if re.search(rf"\b{column}\b", definition.split(" USING ", 1)[1])
        ]
    assert holding == []
