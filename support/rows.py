"""Writing the agent's rows on the hot path: few statements, no query compiler.

``Model.objects.create`` builds its SQL through the query compiler and waits
for a round trip per row; a model step writes several small rows in one
transaction. Inside ``write_behind()`` the rows given to ``insert`` and
``update`` are held and written as common table expressions of the very next
statement the transaction runs, in order: any other query (an ORM read, a
lock) first writes what is held, so nothing reads a row that is not written
yet. At the end of the block the rest is written, as part of a final statement
the caller builds (``take``: the timeline's, which also carries the fence), or
on its own.

Rows inserted here get their primary keys at once, from their sequence: a key
is known before the row is written, so later rows of the same statement can
point at it.

Each held write carries its rows as one JSON parameter (``jsonb_populate_recordset``),
so a statement's text depends only on which tables it writes: the driver parses it
once and the server keeps its plan. A read or a write that touches none of the held
tables can go out in the same statement (``fetch_beside_held``, ``execute_beside_held``),
and a statement that is all of its transaction can be sent as the whole of it
(``whole_transaction``: no BEGIN, no COMMIT round trip).

Only for plain rows: no signals, no multi-table inheritance, no ``auto_now``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from django.db import DatabaseError, connection
from django.db.models import Model, signals
from django.db.models.base import ModelState

# Keys taken at once for rows whose order is their position (a step's, a call's): a turn of ten
# calls uses about twenty, and taking a block costs its step a round trip and a transaction of its
# own (the step can no longer be one statement). Keys a process never uses are gaps, nothing more.
ID_BLOCK = 128

SqlValue = tuple[str, list[Any]]

# What a statement raises when a held write that had to change one row changed none
# (tickets_row_changed_elsewhere(), migration tickets 0007): the whole statement fails, even when it
# is the whole transaction and commits on its own.
ROW_CHANGED_SQLSTATE = "LF002"


class RowChangedElsewhere(ValueError):
    """A held ``update(..., unless_changed=...)`` found its row no longer as this process knew it."""


class _OneRow(tuple):
    """A held write (sql, params) that must change exactly one row; ``refusal``: what the statement
    says when it changes none."""

    refusal: str

    def __new__(cls, sql: str, params: list[Any], refusal: str) -> _OneRow:
        held = super().__new__(cls, (sql, params))
        held.refusal = refusal
        return held


class _Held(threading.local):
    def __init__(self) -> None:
        self.depth = 0
        self.flushing = False
        self.ctes: list[SqlValue] = []
        # Beside each held write: the table it writes, and for a write of one row, (its model, key,
        # the fields an update writes or None for an insert, and the object), so that a later
        # statement writing that row may take it in.
        self.targets: list[tuple[str, tuple[type[Model], Any, tuple[str, ...] | None, Model] | None]] = []


_held = _Held()
_ids: dict[str, list[int]] = {}
_ids_pid = os.getpid()
_ids_lock = threading.Lock()


def _next_ids(model: type[Model], n: int, *, from_block: bool) -> list[int]:
    """Fresh primary keys of ``model``'s table, from its sequence.

    ``from_block``: from a block this process took earlier (no round trip): such keys are unique
    but not in the order rows are written across processes, so only for rows ordered by something
    else (a step's position). Otherwise taken now, in one statement, in order.
    """
    global _ids_pid
    table = model._meta.db_table
    with _ids_lock:
        if _ids_pid != os.getpid():  # a forked child must not reuse its parent's keys
            _ids.clear()
            _ids_pid = os.getpid()
        block = _ids.setdefault(table, []) if from_block else []
        if len(block) < n:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
                    [table, model._meta.pk.column, max(n, ID_BLOCK) if from_block else n],
                )
                block.extend(row[0] for row in cursor.fetchall())
        keys, block[:n] = block[:n], []
        return keys


def forget_key_blocks() -> None:
    """Drop the keys this process reserved ahead: after the tables' sequences were moved (a restore
    resets them past the restored ids) a reserved key may already name a restored row."""
    with _ids_lock:
        _ids.clear()


def _forget_a_block_that_collided(exc: BaseException) -> None:
    """A row written with a key of this process's blocks was refused as already there: the blocks were
    reserved before a restore (in another process: ``manage.py restore_state`` on a live deployment)
    put rows under those keys. Every block is dropped (the restore moved every table's sequence), so
    the step written again (the runner retries it) takes keys past the restored rows."""
    cause = exc.__cause__ if isinstance(exc.__cause__, psycopg.errors.UniqueViolation) else exc
    diag = getattr(cause, "diag", None)
    table = getattr(diag, "table_name", None)
    if isinstance(cause, psycopg.errors.UniqueViolation) and getattr(diag, "constraint_name", None) == f"{table}_pkey":
        forget_key_blocks()


def new_key(model: type[Model]) -> int:
    """A fresh primary key of ``model``'s table, taken from its sequence now (in order)."""
    return _next_ids(model, 1, from_block=False)[0]


def new_key_sql(model: type[Model]) -> tuple[str, list[Any]]:
    """``new_key`` as a query (one row, one value), to send along with other reads."""
    return "SELECT nextval(pg_get_serial_sequence(%s, %s))", [model._meta.db_table, model._meta.pk.column]


def new_keys(*models: type[Model]) -> list[int]:
    """A fresh primary key of each model's table (as ``new_key``), all taken in one statement."""
    queries = [new_key_sql(model) for model in models]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT " + ", ".join(f"({sql})" for sql, _ in queries), [p for _, params in queries for p in params]
        )
        return list(cursor.fetchone())


@functools.cache
def _blank(model: type[Model]) -> tuple[dict[str, Any], tuple[tuple[str, Any], ...], dict[str, str], frozenset[str]]:
    """What ``new`` needs of a model: the constant defaults by attribute, the callable ones, and
    the foreign keys' names (``run``) with their attributes (``run_id``)."""
    if signals.pre_init.has_listeners(model) or signals.post_init.has_listeners(model):
        raise NotImplementedError(f"support.rows.new cannot make {model.__name__}: it has init receivers")
    constant: dict[str, Any] = {}
    called: list[tuple[str, Any]] = []
    related: dict[str, str] = {}
    for field in model._meta.concrete_fields:
        if field.is_relation:
            related[field.name] = field.attname
        if field.has_default() and callable(field.default):
            called.append((field.attname, field.default))
        else:
            constant[field.attname] = field.get_default()
    return constant, tuple(called), related, frozenset(f.attname for f in model._meta.concrete_fields)


def new(model: type[Model], **values: Any) -> Model:
    """An unsaved ``model(**values)``, made without ``Model.__init__`` (about a fifth of the cost;
    a model step makes a dozen rows). For the plain rows of this module: concrete fields only, by
    attribute (``run_id``) or by relation (``run``, the object, cached as ``__init__`` would); no
    ``pre_init``/``post_init`` receivers. A name that is not a field is refused, as by ``__init__``."""
    constant, called, related, attnames = _blank(model)
    obj = model.__new__(model)
    obj._state = ModelState()
    state = obj.__dict__
    state.update(constant)
    for attname, default in called:
        if attname not in values:  # (a default given a value is not made: a clock read, a new dict)
            state[attname] = default()
    for name, value in values.items():
        attname = related.get(name)
        if attname is not None:
            state[attname] = None if value is None else value.pk
            obj._state.fields_cache[name] = value
        elif name in attnames:
            state[name] = value
        else:
            raise TypeError(f"{model.__name__}() got an unexpected keyword argument {name!r}")
    return obj


def _quote(name: str) -> str:
    return connection.ops.quote_name(name)


# Each held write carries its rows as one JSON parameter (a statement's text then depends only on
# which tables it writes, not on how many rows: the driver parses it once and the server keeps its
# plan), read back into the table's row type with jsonb_populate_recordset.
_AS_IS = frozenset(
    {
        "AutoField", "BigAutoField", "SmallAutoField", "IntegerField", "BigIntegerField", "SmallIntegerField",
        "PositiveIntegerField", "PositiveBigIntegerField", "PositiveSmallIntegerField", "CharField", "TextField",
        "BooleanField", "ForeignKey", "OneToOneField", "JSONField",
    }
)  # fmt: skip


def _iso(value: Any) -> Any:
    return None if value is None else value.isoformat()


@functools.cache
def _columns(model: type[Model], names: tuple[str, ...] | None = None) -> tuple[tuple[str, str, Any], ...]:
    """(column, attname, to JSON) of the model's concrete fields (or of ``names``, after the key)."""
    fields = model._meta.concrete_fields if names is None else [model._meta.pk, *map(model._meta.get_field, names)]
    out = []
    for field in fields:
        kind = field.get_internal_type()
        if kind == "DateTimeField":
            convert = _iso
        elif kind in _AS_IS and getattr(field, "encoder", None) is None:
            convert = None
        else:
            raise NotImplementedError(f"support.rows cannot write {model.__name__}.{field.name} ({kind})")
        out.append((field.column, field.attname, convert))
    return tuple(out)


def json_rows(objs: Sequence[Model], names: tuple[str, ...] | None = None) -> str:
    """The objects as a JSON array of rows keyed by column (for ``jsonb_populate_recordset``)."""
    columns = _columns(type(objs[0]), names)
    documents = []
    for obj in objs:
        # A loaded field's value is in the instance's __dict__; a deferred one is loaded by getattr.
        state = obj.__dict__
        document = {}
        for column, attname, convert in columns:
            value = state[attname] if attname in state else getattr(obj, attname)
            document[column] = value if convert is None else convert(value)
        documents.append(document)
    return json.dumps(documents, ensure_ascii=False)


@functools.cache
def _insert_sql(model: type[Model], computed: tuple[tuple[str, str], ...]) -> str:
    given = dict(computed)
    fields = model._meta.concrete_fields
    table = _quote(model._meta.db_table)
    names = ", ".join(_quote(f.column) for f in fields)
    values = ", ".join(given.get(f.name) or f"v.{_quote(f.column)}" for f in fields)
    return f"INSERT INTO {table} ({names}) SELECT {values} FROM jsonb_populate_recordset(NULL::{table}, %s::jsonb) v"


def _insert_cte(objs: Sequence[Model], computed: dict[str, SqlValue]) -> SqlValue:
    # The computed columns' SQL comes before the rows in the statement, so their parameters do too.
    sql = _insert_sql(type(objs[0]), tuple((name, sql) for name, (sql, _) in computed.items()))
    return sql, [*(p for _, values in computed.values() for p in values), json_rows(objs)]


@functools.cache
def _update_sql(model: type[Model], names: tuple[str, ...], one: bool) -> str:
    table = _quote(model._meta.db_table)
    pk = _quote(model._meta.pk.column)
    columns = [_quote(column) for column, _, _ in _columns(model, names)[1:]]
    head = f"UPDATE {table} AS t SET " + ", ".join(f"{c} = v.{c}" for c in columns)
    # The statement is prepared once and its generic plan kept for the connection's life, so the
    # plan must not depend on how big the table was then: a plan made while it was small scans it
    # whole, on every step, for ever. One row is found by ``key = %s`` (always the index); several
    # by ``= ANY`` of their keys (the planner cannot tell how many rows a JSON document holds).
    if one:
        return head + f" FROM jsonb_populate_record(NULL::{table}, (%s::jsonb) -> 0) v WHERE t.{pk} = %s"
    return head + (
        f" FROM jsonb_populate_recordset(NULL::{table}, %s::jsonb) v WHERE t.{pk} = ANY(%s) AND t.{pk} = v.{pk}"
    )


def _update_cte(objs: Sequence[Model], names: Sequence[str]) -> SqlValue:
    document = json_rows(objs, tuple(names))
    if len(objs) == 1:
        return _update_sql(type(objs[0]), tuple(names), True), [document, objs[0].pk]
    return _update_sql(type(objs[0]), tuple(names), False), [document, [obj.pk for obj in objs]]


def insert(
    objs: Sequence[Model], *, computed: dict[str, SqlValue] | None = None, keys_from_block: bool = False
) -> None:
    """Insert the objects (one model, not saved yet). Their keys are set at once (see ``_next_ids``
    for ``keys_from_block``); the rows are written with the next statement inside
    ``write_behind()``, or now outside it."""
    if not objs:
        return
    missing = [obj for obj in objs if obj.pk is None]
    if missing:
        for obj, key in zip(missing, _next_ids(type(objs[0]), len(missing), from_block=keys_from_block), strict=True):
            obj.pk = key
    for obj in objs:
        obj._state.adding = False
        obj._state.db = connection.alias
    # An insert of one row is marked (no fields) so that a statement writing that row may take it in.
    one_row = (type(objs[0]), objs[0].pk, None, objs[0]) if len(objs) == 1 else None
    _hold(_insert_cte(objs, computed or {}), type(objs[0]), one_row)


def insert_sql(objs: Sequence[Model], *, computed: dict[str, SqlValue] | None = None) -> SqlValue:
    """The INSERT of the objects (their keys set) as ``insert`` holds it, for a caller's own statement."""
    return _insert_cte(objs, computed or {})


def update(
    objs: Sequence[Model], fields: Sequence[str], *, unless_changed: tuple[dict[str, Any], str] | None = None
) -> None:
    """Write ``fields`` of the objects (one model, rows already written) from their values in memory.

    ``unless_changed``: (the values the one row must still have, what to say if it has not): the
    statement that writes it fails whole (``RowChangedElsewhere``) if the row no longer has them.

    The writes of one statement happen in no set order, and none sees another's rows, so an
    update waits for no held write of its table: the held rows are written first if there is one."""
    if not objs:
        return
    model = type(objs[0])
    if holds_writes_to([model._meta.db_table]):
        flush()
    cte = _update_cte(objs, fields)
    if unless_changed is not None:
        if len(objs) != 1:
            raise ValueError("update(unless_changed=...) writes one row")
        expected, refusal = unless_changed
        names = tuple(expected)
        quote = connection.ops.quote_name
        fields_of = [model._meta.get_field(name) for name in names]
        where = "".join(f" AND t.{quote(f.column)} = %s" for f in fields_of)
        values = [f.get_db_prep_save(expected[f.name], connection) for f in fields_of]
        _hold(_OneRow(f"{cte[0]}{where} RETURNING 1", [*cte[1], *values], refusal), model)
        return
    one_row = (model, objs[0].pk, tuple(fields), objs[0]) if len(objs) == 1 else None
    _hold(cte, model, one_row)


def _hold(cte: SqlValue, model: type[Model], one_row: Any = None) -> None:
    if _held.depth:
        _held.ctes.append(cte)
        _held.targets.append((model._meta.db_table, one_row))
        return
    with connection.cursor() as cursor, _refusals():
        cursor.execute(*statement([cte]))


def take_update(model: type[Model], pk: Any) -> tuple[tuple[str, ...], Model] | None:
    """Take back the held update of the one row ``model``/``pk`` (the fields and the object), for
    a caller whose own statement updates that row and writes these fields with it (PostgreSQL
    changes a row at most once per statement). None if there is no such held update alone."""
    for at, (_, one_row) in enumerate(_held.targets):
        if one_row is not None and one_row[2] is not None and one_row[0] is model and one_row[1] == pk:
            del _held.ctes[at], _held.targets[at]
            return one_row[2], one_row[3]
    return None


def take_insert(model: type[Model], pk: Any) -> Model | None:
    """Take back the held insert of the one row ``model``/``pk`` (the object), for a caller whose own
    statement inserts that row (with values of its own). None if there is no such held insert alone."""
    for at, (_, one_row) in enumerate(_held.targets):
        if one_row is not None and one_row[2] is None and one_row[0] is model and one_row[1] == pk:
            del _held.ctes[at], _held.targets[at]
            return one_row[3]
    return None


@contextlib.contextmanager
def whole_transaction(wanted: bool = True) -> Iterator[None]:
    """The statement run in this block is the whole of the current transaction, when nothing of
    that transaction has reached the server yet: it is sent on its own (autocommit), which saves
    the BEGIN and the COMMIT round trips; the transaction's COMMIT then has nothing to do. The
    caller knows that no statement of the transaction follows; an error fails the statement
    whole, as it would fail the transaction."""
    raw = connection.connection
    if not (wanted and connection.in_atomic_block and raw is not None and not raw.autocommit):
        yield
        return
    if raw.pgconn.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        yield  # the transaction is open on the server: the statement goes in it
        return
    raw.autocommit = True
    try:
        yield
    finally:
        raw.autocommit = False


def holds_writes_to_any() -> bool:
    return bool(_held.ctes)


def holds_writes_to(tables: Sequence[str]) -> bool:
    return any(table in tables for table, _ in _held.targets)


def _beside_held(sql: str, params: Sequence[Any], tables: Sequence[str], fetch: bool) -> Any:
    if holds_writes_to(tables) or any(isinstance(cte, _OneRow) for cte in _held.ctes):
        flush()  # (a write that must change one row is checked by a statement of this module's own)
    head, held_params = with_clause(take())
    _held.flushing = True
    try:
        with connection.cursor() as cursor:
            cursor.execute((head[:-2] + " " if head else "") + sql, [*held_params, *params])
            return cursor.fetchall() if fetch else cursor.rowcount
    finally:
        _held.flushing = False


def fetch_beside_held(sql: str, params: Sequence[Any], *, tables: Sequence[str]) -> list[tuple[Any, ...]]:
    """Run a read as the main query of the statement that writes the held rows: one round trip.

    Every part of a statement sees the database as it was before the statement, so the read does
    not see the held rows: ``tables`` names what it reads, and if a held write touches one of
    them, the held rows are written first, on their own."""
    return _beside_held(sql, params, tables, fetch=True)


def execute_beside_held(sql: str, params: Sequence[Any], *, table: str) -> int:
    """Run a write (``sql`` on ``table``) as the main part of the statement that writes the held
    rows; its row count. If a held write touches the same table, the held rows go first."""
    return _beside_held(sql, params, [table], fetch=False)


def updates(cte: SqlValue, model: type[Model]) -> bool:
    """Is this held write an update of ``model``'s table? (PostgreSQL changes a row at most once
    per statement: a caller about to update the same rows writes such a held update first.)"""
    return cte[0].startswith(f"UPDATE {_quote(model._meta.db_table)} ")


def take() -> list[SqlValue]:
    """The writes held so far, for the caller to put in front of its own statement (as CTEs)."""
    ctes, _held.ctes, _held.targets = _held.ctes, [], []
    return ctes


def with_clause(ctes: list[SqlValue], *, name: str = "held") -> SqlValue:
    """``WITH held_0 AS (...), held_1 AS (...), `` (with a trailing comma) and its parameters."""
    sql = "".join(f"{name}_{n} AS ({cte}), " for n, (cte, _) in enumerate(ctes))
    return (f"WITH {sql}" if sql else ""), [p for _, params in ctes for p in params]


def checks(ctes: list[SqlValue], *, name: str = "held") -> SqlValue:
    """A condition, for the main query of a statement that carries ``ctes`` (``with_clause``), that
    fails the statement if one of them that must change one row changed none; "TRUE" if none must."""
    parts, params = [], []
    for n, cte in enumerate(ctes):
        if isinstance(cte, _OneRow):
            parts.append(f"(EXISTS (SELECT 1 FROM {name}_{n}) OR tickets_row_changed_elsewhere(%s))")
            params.append(cte.refusal)
    return " AND ".join(parts) or "TRUE", params


def statement(ctes: list[SqlValue]) -> SqlValue:
    """The writes as one statement: all but the last as CTEs in front of the last (or all as CTEs,
    and their checks as the main query, when one must change one row)."""
    condition, condition_params = checks(ctes)
    if condition_params:
        head, params = with_clause(ctes)
        return f"{head[:-2]} SELECT {condition}", params + condition_params
    head, params = with_clause(ctes[:-1])
    return (head[:-2] + " " if head else "") + ctes[-1][0], params + ctes[-1][1]


def flush() -> None:
    """Write what is held now, in one statement."""
    ctes = take()
    if not ctes:
        return
    _held.flushing = True
    try:
        with connection.cursor() as cursor:
            cursor.execute(*statement(ctes))
    finally:
        _held.flushing = False


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    try:
        yield
    except DatabaseError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == ROW_CHANGED_SQLSTATE:
            raise RowChangedElsewhere(exc.__cause__.diag.message_primary) from None
        raise


def _before_any_statement(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
    if _held.ctes and not _held.flushing:
        flush()
    with _refusals():
        return execute(sql, params, many, context)


@contextlib.contextmanager
def write_behind() -> Iterator[None]:
    """Hold the rows written with ``insert``/``update`` until the next statement (see above).
    Whatever is still held when the block ends is written then; if it raises, dropped."""
    if _held.depth:
        _held.depth += 1
        try:
            yield
        finally:
            _held.depth -= 1
        return
    _held.depth = 1
    try:
        with connection.execute_wrapper(_before_any_statement):
            yield
            flush()
    except BaseException as exc:
        _held.ctes, _held.targets = [], []
        _forget_a_block_that_collided(exc)
        raise
    finally:
        _held.depth = 0
