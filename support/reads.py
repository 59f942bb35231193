"""Reading the agent's rows on the hot path: plain SQL kept per shape, no query compiler.

A pass of the loop reads the same few shapes of rows every time (a ticket with its
customer, its active run, its steps, calls and messages). Building each such query
through the ORM costs more than the round trip that sends it. Here the SQL of a
shape is built once from the model's fields and kept; a read sends it with its
parameters and makes the model instances the ORM would have made (the same field
conversions, the related row cached where one is joined).

For reads whose shape does not change; anything else goes through the ORM.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from typing import Any

from django.db import connection, transaction
from django.db.models import Model

from support import rows


@functools.cache
def _shape(model: type[Model]) -> tuple[str, tuple[str, ...], tuple[tuple[int, Any], ...]]:
    """(the model's columns as SQL, its attnames in order, (position, converter) of fields that convert)."""
    quote = connection.ops.quote_name
    fields = model._meta.concrete_fields
    table = quote(model._meta.db_table)
    columns = ", ".join(f"{table}.{quote(f.column)}" for f in fields)
    converters = tuple(
        (at, converter) for at, field in enumerate(fields) for converter in field.get_db_converters(connection)
    )
    return columns, tuple(f.attname for f in fields), converters


def columns_of(model: type[Model]) -> str:
    """The model's columns, qualified by its table, in the order ``instances`` reads them."""
    return _shape(model)[0]


def instances(model: type[Model], rows: Sequence[Sequence[Any]], *, start: int = 0) -> list[Any]:
    """The model's instances from rows whose columns ``start`` on are ``columns_of(model)``."""
    _, names, converters = _shape(model)
    width = len(names)
    out = []
    for row in rows:
        values = list(row[start : start + width])
        for at, converter in converters:
            if values[at] is not None:
                values[at] = converter(values[at], None, connection)
        out.append(model.from_db(connection.alias, names, values))
    return out


def fetch(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def select_sql(model: type[Model], where: str, params: Sequence[Any], *, tail: str = "") -> tuple[str, Sequence[Any]]:
    """``SELECT <model's columns> FROM <its table> WHERE <where> <tail>`` and its parameters."""
    table = connection.ops.quote_name(model._meta.db_table)
    return f"SELECT {columns_of(model)} FROM {table} WHERE {where} {tail}", params


def select(model: type[Model], where: str, params: Sequence[Any], *, tail: str = "") -> list[Any]:
    """``select_sql``'s rows as model instances."""
    return instances(model, fetch(*select_sql(model, where, params, tail=tail)))


def select_with_sql(
    model: type[Model], related: str, where: str, params: Sequence[Any], *, tail: str = ""
) -> tuple[str, Sequence[Any]]:
    """``select_sql`` with the row the foreign key ``related`` points at joined (see ``with_related``)."""
    field = model._meta.get_field(related)
    other = field.related_model
    quote = connection.ops.quote_name
    table, other_table = quote(model._meta.db_table), quote(other._meta.db_table)
    sql = (
        f"SELECT {columns_of(model)}, {columns_of(other)} FROM {table} JOIN {other_table} "
        f"ON {other_table}.{quote(field.target_field.column)} = {table}.{quote(field.column)} WHERE {where} {tail}"
    )
    return sql, params


def with_related(model: type[Model], related: str, rows: Sequence[Sequence[Any]]) -> list[Any]:
    """The instances of ``select_with_sql``'s rows, the related row cached on each (what
    ``select_related(related)`` does for one non-null foreign key)."""
    field = model._meta.get_field(related)
    out = instances(model, rows)
    for instance, target in zip(out, instances(field.related_model, rows, start=len(_shape(model)[1])), strict=True):
        field.set_cached_value(instance, target)
    return out


def select_with(model: type[Model], related: str, where: str, params: Sequence[Any], *, tail: str = "") -> list[Any]:
    """As ``select``, with the row that the foreign key ``related`` points at joined and cached."""
    return with_related(model, related, fetch(*select_with_sql(model, related, where, params, tail=tail)))


class Kept:
    """The SQL of a query the ORM builds (its one definition stays there), compiled once and sent
    again with another value in one place: ``build(value)`` returns the queryset for ``value``.

    The query is compiled with a marker value no row has, found again among the parameters, and
    replaced there on each call; a query whose parameters hold the marker other than once is refused.
    """

    MARKER = -7_319_423_105

    def __init__(self, build: Any) -> None:
        self.build = build
        self._compiled: tuple[str, list[Any], int] | None = None

    def sql(self, value: Any) -> tuple[str, list[Any]]:
        if self._compiled is None:
            queryset = self.build(self.MARKER)
            sql, params = queryset.query.get_compiler(queryset.db).as_sql()
            at = [i for i, param in enumerate(params) if param == self.MARKER]
            if len(at) != 1:
                raise ValueError(f"the marker is {len(at)} times in the query's parameters, not once: {sql}")
            self._compiled = (sql, list(params), at[0])
        sql, params, at = self._compiled
        params = list(params)
        params[at] = value
        return sql, params

    def exists(self, value: Any) -> bool:
        sql, params = self.sql(value)
        return bool(fetch(f"SELECT EXISTS ({sql})", params)[0][0])


def fetch_together(queries: Sequence[tuple[str, Sequence[Any]]]) -> list[list[tuple[Any, ...]]]:
    """Several reads in one round trip (the driver's pipeline mode); the rows of each, in order.
    Not while rows are held for a write (``support.rows``): they would not be written first."""
    if rows.holds_writes_to_any():
        raise RuntimeError("fetch_together() while rows are held: they would not be written first")
    connection.ensure_connection()
    raw = connection.connection
    cursors = [raw.cursor() for _ in queries]
    try:
        with connection.wrap_database_errors, raw.pipeline():
            for cursor, (sql, params) in zip(cursors, queries, strict=True):
                cursor.execute(sql, params)
        return [cursor.fetchall() for cursor in cursors]
    finally:
        for cursor in cursors:
            cursor.close()


@contextlib.contextmanager
def one_snapshot(*, long: bool = False) -> Iterator[None]:
    """Every read inside from one snapshot of the database (a repeatable-read, read-only transaction):
    a page that shows a row and the rows that tell its story (a ticket's status and holder, and its
    timeline) shows them as they were at one moment, never the row before a change and its story
    after it. Inside a caller's transaction, that transaction is the snapshot. ``long``: the caller
    may work longer than DB_IDLE_IN_TRANSACTION_TIMEOUT_MS between its reads (a large state export);
    a read-only snapshot holds no row lock, so the server is told not to end the session for it."""
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            if long:
                cursor.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
        yield
