"""The cost of waiting: N tickets (default 10,000) paused for a staff approval, workers running.

A pause is rows only (DESIGN, invariant 7): the call ``awaiting_approval``, the run
``waiting_approval``, the ticket ``pending_approval``, an approval request. This part
measures what N of them cost while the web server, the workers and beat are running:

- worker processes and their RSS (psutil; a process and its children) before and after;
- database bytes per paused ticket: ``pg_database_size`` of the scratch database, and
  ``pg_total_relation_size`` of the tables the pauses wrote, after minus before, / N;
- the sweeper's query (``agents.tasks.tickets_needing_a_ring``), timed in this process,
  and the doorbells left in the workers' queue;
- a new ticket served meanwhile: ``--samples`` tickets opened one after another over
  HTTP (``POST /tickets/new/``, "Where is my order A-1001?"), POST -> reply stored, with
  no paused ticket and again with N.

How the pauses are made (printed, and in the JSON):

- through the worker processes: bob signs in and opens ``--paused-real`` tickets (default
  500) over HTTP (``POST /tickets/new/``, "Please refund my order B-2001, $649"), at most
  ``PAUSE_IN_FLIGHT`` (8) waiting at a time. The running workers answer them as any ticket,
  with the offline model: ``lookup_order``, then ``issue_refund`` of $649.00 on B-2001
  (bob's; above the approval threshold of $200), which the policy pauses. Each is waited
  for in the database until its run is ``waiting_approval`` with a pending approval
  request; a run that ends any other way stops the part. The figure says how long they
  took (pauses/s, POST -> paused). On 2 shared cores 500 take 40 to 60 s (9 to 12/s);
- the rest by bulk copy: ``INSERT ... SELECT`` of every row of one of those tickets (the
  last with the rows per table most of them have: 2 model steps, 2 tool calls, 9 timeline
  events...), table by table, with new ids that keep the rows' order, and every reference
  rewritten to the copy's own rows: foreign keys (step -> run, call -> step, approval ->
  call, a step's request prefix -> the earlier step), ids inside JSON (the run's input
  messages, the events' message, run, call and approval ids), ``run:<id>`` actors, the
  ticket named in the model's request, the opening message's client id; the idempotency
  keys recomputed as ``agents.calls.idempotency_key`` computes them. It refuses to run if
  the pauses wrote a table it does not copy (the sign-in's session and access-log rows
  aside), a column refers to a copied row it does not rewrite, or a JSON value holds row
  ids it does not rewrite. Then it checks every paused ticket (call, run, ticket,
  approval), that each copy has the template's rows table by table, that every reference
  of every ticket points at a row of that same ticket, every idempotency key, and that a
  copy rebuilds the template's conversation (``agents.conversation``).

``--paused-real`` equal to ``--paused`` makes every pause through the workers.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from bench import throughput
from bench.common import DEMO_QUESTIONS, Context, PartResult, latency_summary, mib, redis_queue_length
from bench.overhead import BenchError

REFUND_ORDER = "B-2001"  # bob's espresso machine, $649.00: above the default approval threshold ($200)
REFUND_CUSTOMER = "bob"
REFUND_CENTS = 64900
REFUND_BODY = "Please refund my order B-2001, $649"  # the offline model: lookup_order, then issue_refund
PAUSE_IN_FLIGHT = 8  # tickets waiting to be paused at a time: the workers never wait for work
# Written by the customer's sign-in over HTTP (a row per sign-in, none per pause): not copied.
SIGN_IN_TABLES = ("django_session", "axes_accesslog")
SIGN_INS = 1  # pause_real signs bob in once


# --- measuring --------------------------------------------------------------------------------------


def _table_rows(tables: list[str]) -> dict[str, int]:
    from django.db import connection

    out = {}
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f'SELECT count(*) FROM "{table}"')  # noqa: S608 - names from pg_catalog
            out[table] = cursor.fetchone()[0]
    return out


def _user_tables() -> list[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT relname FROM pg_stat_user_tables WHERE schemaname = 'public' ORDER BY relname")
        return [row[0] for row in cursor.fetchall()]


def _sizes(tables: list[str]) -> dict[str, Any]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_database_size(current_database())")
        database = cursor.fetchone()[0]
        cursor.execute(
            "SELECT relname, pg_total_relation_size(relid) FROM pg_stat_user_tables WHERE relname = ANY(%s)", [tables]
        )
        per_table = dict(cursor.fetchall())
    return {"database": database, "tables": per_table, "tables_total": sum(per_table.values())}


def _processes(cluster: Any) -> dict[str, Any]:
    out = {}
    for proc in cluster.procs:
        out[proc.name] = {"pid": proc.pid, "processes": len(proc.processes()), "rss_bytes": proc.rss_bytes()}
    return out


def _sweeper_ms(repeat: int = 5) -> dict[str, Any]:
    from agents.tasks import tickets_needing_a_ring

    times, found = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        found = len(tickets_needing_a_ring())
        times.append((time.perf_counter() - t0) * 1000)
    return {"median_ms": statistics.median(times), "tickets_to_ring": found}


def _sample(base_url: str, samples: int) -> list[dict[str, Any]]:
    """``samples`` new tickets one after another (each waits for its reply before the next)."""
    out = []
    for _ in range(samples):
        out += throughput.serve(base_url, [("alice", DEMO_QUESTIONS["alice"])], in_flight=1, timeout=120)
    return out


# --- pausing: through the worker processes ---------------------------------------------------------


def paused_at(ticket_ids: list[int]) -> dict[int, float]:
    """Ticket id -> when its refund was put before staff (epoch seconds), for those paused on it.

    Raises if the run of one of them ended any other way: it would never pause.
    """
    from agents.models import AgentRun, RunStatus
    from approvals.models import ApprovalRequest

    ended = (
        AgentRun.objects.filter(ticket_id__in=ticket_ids)
        .exclude(status__in=[RunStatus.RUNNING, RunStatus.WAITING_APPROVAL])
        .first()
    )
    if ended is not None:
        raise BenchError(f"ticket {ended.ticket_id}: the run ended {ended.status!r}, not waiting_approval")
    rows = ApprovalRequest.objects.filter(
        ticket_id__in=ticket_ids, tool_call__run__status=RunStatus.WAITING_APPROVAL
    ).values_list("ticket_id", "requested_at")
    return {ticket_id: at.timestamp() for ticket_id, at in rows}


def pause_real(base_url: str, count: int, *, in_flight: int = PAUSE_IN_FLIGHT) -> list[dict[str, Any]]:
    """``count`` tickets opened over HTTP by bob, asking for the refund of B-2001; the running worker
    processes answer them as any ticket (the offline model looks the order up, asks for the
    refund, the policy pauses it). ``in_flight`` at a time, each waited for until it is paused.
    Returns one record per ticket (``throughput.serve``'s; ``reply_at`` is when it paused)."""
    bodies = [(REFUND_CUSTOMER, REFUND_BODY)] * count
    return throughput.serve(base_url, bodies, in_flight=in_flight, timeout=120 + 2 * count, done=paused_at)


def prepare() -> None:
    """Make what the first pause would otherwise make (one row each): not a cost of any one pause."""
    from agents.profiles import active_profile
    from approvals.models import ApprovalPolicy

    ApprovalPolicy.current()
    active_profile()


def tables_written(before: dict[str, int], after: dict[str, int]) -> set[str]:
    """The tables the pauses wrote, by rows per table before and after them; the sign-in's aside."""
    grew = {table for table in after if after[table] != before.get(table)}
    for table in SIGN_IN_TABLES:
        if after.get(table, 0) - before.get(table, 0) > SIGN_INS:
            raise BenchError(f"{table} grew by more than the sign-in writes: does a pause write to it?")
    return grew - set(SIGN_IN_TABLES)


# --- pausing: bulk copies of a ticket paused through the workers ------------------------------------


@dataclass(frozen=True)
class Ref:
    """A reference to a row of ``table``, a copied table: a copy refers to that row's copy."""

    table: str

    def sql(self, value: str) -> str:
        """The copy's id for the template's ``value`` (an id as SQL; NULL stays NULL)."""
        return (
            f"(SELECT n.new FROM bench_clone_map n WHERE n.tbl = '{self.table}' AND n.g = m.g "
            f"AND n.old = ({value})::bigint)"
        )

    def json_sql(self, obj: str, key: str) -> str:
        return f"to_jsonb({self.sql(f'{obj}->>{key!r}')})"


@dataclass(frozen=True)
class RefList:
    """A JSON list of references to rows of ``table``, each rewritten as ``Ref`` does, in order."""

    table: str

    def sql(self, value: str) -> str:
        each = Ref(self.table).sql("e.v")
        return (
            f"(SELECT coalesce(jsonb_agg(to_jsonb({each}) ORDER BY e.i), '[]'::jsonb) "
            f"FROM jsonb_array_elements_text({value}) WITH ORDINALITY AS e(v, i))"
        )

    def json_sql(self, obj: str, key: str) -> str:
        return self.sql(f"{obj}->{key!r}")


TICKET = Ref("tickets_ticket")
# The copy's client_ref: the template's, made unique per customer with the copy's ticket id
# (NULL stays NULL: || NULL is NULL).
COPY_CLIENT_REF = f"left(%(client_ref)s, 79) || '/' || {TICKET.sql('%(template)s')}"


@dataclass(frozen=True)
class OpeningMessageId:
    """``open:<client_ref>`` names a ticket's first message (tickets.services.ticket_open): a
    copy's names the copy's client_ref. Any other value is copied as it is."""

    def sql(self, value: str) -> str:
        return f"CASE WHEN ({value}) = 'open:' || %(client_ref)s THEN 'open:' || {COPY_CLIENT_REF} ELSE ({value}) END"

    def json_sql(self, obj: str, key: str) -> str:
        return f"to_jsonb({self.sql(f'{obj}->>{key!r}')})"


@dataclass(frozen=True)
class JsonKeys:
    """A JSON object whose ``keys`` are rewritten where present; its other keys are copied."""

    keys: dict[str, Ref | RefList | OpeningMessageId]

    def sql(self, value: str) -> str:
        pairs = ", ".join(
            f"'{key}', CASE WHEN {value} ? '{key}' THEN {rewrite.json_sql(value, key)} END"
            for key, rewrite in self.keys.items()
        )
        return f"{value} || jsonb_strip_nulls(jsonb_build_object({pairs}))"


NEW = "new id"  # each copy of the row gets one from the table's sequence (the map's ``new``)
RUN_ACTOR = "CASE WHEN {row}.actor_ref LIKE 'run:%%' THEN substr({row}.actor_ref, 5)::bigint END"

# Copied tables, in foreign-key order, and the columns rewritten in each copy (the others are
# copied as they are): NEW, a Ref, RefList, OpeningMessageId or JsonKeys of the template's value,
# or SQL over ``t`` (the template's row) and ``m`` (the copied row's line of bench_clone_map).
CLONED: dict[str, dict[str, Any]] = {
    "tickets_ticket": {"id": NEW, "client_ref": COPY_CLIENT_REF},
    "tickets_message": {"id": NEW, "ticket_id": TICKET, "client_msg_id": OpeningMessageId()},
    "agents_agentrun": {"id": NEW, "ticket_id": TICKET, "input_message_ids": RefList("tickets_message")},
    "agents_modelstep": {
        "id": NEW,
        "ticket_id": TICKET,
        "run_id": Ref("agents_agentrun"),
        "request_prefix_id": Ref("agents_modelstep"),  # an earlier step of the same pass
        # The system message names the ticket (agents.conversation.system_message).
        "request_messages": f"replace(t.request_messages::text, %(ticket_tag)s, "
        f"'Ticket #' || {TICKET.sql('t.ticket_id')} || ':')::jsonb",
    },
    "agents_toolcall": {
        "id": NEW,
        "ticket_id": TICKET,
        "run_id": Ref("agents_agentrun"),
        "step_id": Ref("agents_modelstep"),
        # agents.calls.idempotency_key: t{ticket}-r{run}-s{step index}-c{call index}-{8 random hex digits}
        "idempotency_key": f"format('t%%s-r%%s-s%%s-c%%s-%%s', {TICKET.sql('t.ticket_id')}, "
        f"{Ref('agents_agentrun').sql('t.run_id')}, "
        "(SELECT s.index FROM agents_modelstep s WHERE s.id = t.step_id), t.index, "
        "substr(md5(random()::text), 1, 8))",
    },
    "approvals_approvalrequest": {"id": NEW, "ticket_id": TICKET, "tool_call_id": Ref("agents_toolcall")},
    "agents_ticketlease": {"ticket_id": TICKET},
    "tickets_ticketevent": {
        "id": NEW,
        "ticket_id": TICKET,
        "actor_ref": f"CASE WHEN t.actor_ref LIKE 'run:%%' "
        f"THEN 'run:' || {Ref('agents_agentrun').sql(RUN_ACTOR.format(row='t'))} ELSE t.actor_ref END",
        "payload": JsonKeys(
            {
                "message_id": Ref("tickets_message"),
                "client_msg_id": OpeningMessageId(),
                "messages": RefList("tickets_message"),
                "run_id": Ref("agents_agentrun"),
                "step_id": Ref("agents_modelstep"),
                "call_id": Ref("agents_toolcall"),
                "approval_id": Ref("approvals_approvalrequest"),
            }
        ),
    },
}
# A JSON key that names a row: ``id``, ``..._id`` or ``..._ids``, when it holds integers.
ROW_KEY = re.compile(r"^(id|.+_ids?)$")
# JSON lists of integers that are not row ids: copied as they are.
NOT_ROW_IDS = {("agents_agentrun", "epochs"): "the lease epochs the run went through"}


def _ticket_of(table: str, row: str) -> str:
    return f"{row}.id" if table == "tickets_ticket" else f"{row}.ticket_id"


def _columns(cursor: Any, table: str) -> list[tuple[str, str]]:
    cursor.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = 'public' "
        "AND table_name = %s AND is_generated = 'NEVER' ORDER BY ordinal_position",
        [table],
    )
    return [(row[0], row[1]) for row in cursor.fetchall()]


def _foreign_keys(cursor: Any) -> list[tuple[str, str, str]]:
    """(table, column, referenced table) of every foreign key between copied tables."""
    cursor.execute(
        """
        SELECT src.relname, a.attname, dst.relname
          FROM pg_constraint c
          JOIN pg_class src ON src.oid = c.conrelid
          JOIN pg_class dst ON dst.oid = c.confrelid
          JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY(c.conkey)
         WHERE c.contype = 'f' AND src.relname = ANY(%s) AND dst.relname = ANY(%s)
        """,
        [list(CLONED), list(CLONED)],
    )
    return cursor.fetchall()


def _integers(value: Any) -> bool:
    def integer(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    return integer(value) or (isinstance(value, list) and bool(value) and all(integer(v) for v in value))


def _json_row_ids(value: Any, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Paths in a JSON document that hold what looks like row ids: a key named like one with an
    integer (or integers), or a list of integers."""
    found: list[tuple[str, ...]] = []
    if isinstance(value, list) and _integers(value):
        return [path]
    items = value.items() if isinstance(value, dict) else (("[]", v) for v in value) if isinstance(value, list) else ()
    for key, item in items:
        if ROW_KEY.match(key) and _integers(item):
            found.append((*path, key))
        else:
            found += _json_row_ids(item, (*path, key))
    return found


def _check_clonable(cursor: Any, template_id: int, written: set[str]) -> None:
    """Refuse if the pauses wrote a table we do not copy, a column refers to a copied row we do
    not rewrite, or a JSON value of the template holds row ids where we do not rewrite them."""
    unknown = written - set(CLONED)
    if unknown:
        raise BenchError(
            f"the pauses wrote {sorted(unknown)}, which the bulk copy does not know; "
            "use --paused-real equal to --paused"
        )
    for table, column, target in _foreign_keys(cursor):
        if CLONED[table].get(column) not in (NEW, Ref(target)):
            raise BenchError(f"{table}.{column} refers to {target}, but the bulk copy does not rewrite it")
    for table, rewrites in CLONED.items():
        for column, data_type in _columns(cursor, table):
            rewrite = rewrites.get(column)
            if data_type != "jsonb" or isinstance(rewrite, RefList) or (table, column) in NOT_ROW_IDS:
                continue
            known = {(column, key) for key in rewrite.keys} if isinstance(rewrite, JsonKeys) else set()
            cursor.execute(
                f'SELECT t."{column}" FROM {table} t WHERE {_ticket_of(table, "t")} = %s',  # noqa: S608
                [template_id],
            )
            for (document,) in cursor.fetchall():
                if isinstance(document, str):
                    document = json.loads(document)  # Django's cursor leaves jsonb as text
                missed = [p for p in _json_row_ids(document, (column,)) if p not in known]
                if missed:
                    raise BenchError(
                        f"{table}.{'.'.join(missed[0])} holds row ids, but the bulk copy does not rewrite them"
                    )


def _value(column: str, rewrite: Any) -> str:
    if rewrite is None:
        return f't."{column}"'
    if rewrite == NEW:
        return "m.new"
    if isinstance(rewrite, str):
        return rewrite
    return rewrite.sql(f't."{column}"')


def pause_bulk(template_id: int, count: int, written: set[str]) -> list[int]:
    """``count`` copies of every row of ticket ``template_id`` (paused through the workers), table by
    table, with new ids and every reference rewritten; returns the copies' ticket ids.

    bench_clone_map holds, for each copy ``g`` and each of the template's rows, the copy's id
    (``new``) of the template's row (``tbl``, ``old``); ids within a copy keep the template's order.
    """
    from django.db import connection, transaction

    from tickets.models import Ticket

    template = Ticket.objects.get(pk=template_id)
    params = {
        "template": template_id,
        "client_ref": template.client_ref,
        "ticket_tag": f"Ticket #{template_id}:",
        "count": count,
    }
    with transaction.atomic(), connection.cursor() as cursor:
        _check_clonable(cursor, template_id, written)
        cursor.execute("DROP TABLE IF EXISTS bench_clone_map")
        cursor.execute(
            "CREATE TEMP TABLE bench_clone_map (tbl text, old bigint, g integer, new bigint, "
            "PRIMARY KEY (tbl, old, g)) ON COMMIT DROP"
        )
        for table, rewrites in CLONED.items():
            if rewrites.get("id") != NEW:
                continue
            rows = (
                f"{table} t CROSS JOIN generate_series(1, %(count)s) AS g WHERE {_ticket_of(table, 't')} = %(template)s"
            )
            cursor.execute(
                f"""
                INSERT INTO bench_clone_map (tbl, old, g, new)
                SELECT '{table}', r.old, r.g, i.new
                  FROM (SELECT t.id AS old, g, row_number() OVER (ORDER BY g, t.id) AS k FROM {rows}) r
                  JOIN (SELECT new, row_number() OVER (ORDER BY new) AS k
                          FROM (SELECT nextval(pg_get_serial_sequence('{table}', 'id')) AS new FROM {rows}) s) i
                 USING (k)
                """,  # noqa: S608 - names from CLONED
                params,
            )
        cursor.execute("ANALYZE bench_clone_map")
        for table, rewrites in CLONED.items():
            columns = [column for column, _ in _columns(cursor, table)]
            names = ", ".join(f'"{c}"' for c in columns)
            values = ", ".join(_value(c, rewrites.get(c)) for c in columns)
            # A row with an id of its own is copied once per line of the map; the lease (its key is
            # the ticket) once per copy of the ticket.
            mapped, key = (table, "t.id") if rewrites.get("id") == NEW else ("tickets_ticket", "t.ticket_id")
            cursor.execute(
                f"INSERT INTO {table} ({names}) SELECT {values} FROM {table} t "  # noqa: S608 - names from CLONED
                f"JOIN bench_clone_map m ON m.tbl = '{mapped}' AND m.old = {key} "
                f"WHERE {_ticket_of(table, 't')} = %(template)s ORDER BY m.g, {key}",
                params,
            )
        cursor.execute("SELECT new FROM bench_clone_map WHERE tbl = 'tickets_ticket' ORDER BY g")
        return [row[0] for row in cursor.fetchall()]


# --- checking the pauses -------------------------------------------------------------------------------


def _rows_per_ticket(cursor: Any, table: str, ids: list[int]) -> dict[int, int]:
    key = _ticket_of(table, "t")
    cursor.execute(f"SELECT {key}, count(*) FROM {table} t WHERE {key} = ANY(%s) GROUP BY 1", [ids])  # noqa: S608
    counts = dict(cursor.fetchall())
    return {ticket: counts.get(ticket, 0) for ticket in ids}


def template_of(real: list[int], tables: list[str]) -> tuple[int, int]:
    """The ticket to copy: the last of the real pauses with the rows per table most of them have.
    Returns it and how many real pauses have its rows per table."""
    from django.db import connection

    with connection.cursor() as cursor:
        counts = {table: _rows_per_ticket(cursor, table, real) for table in tables}
    shapes = {ticket: tuple(counts[table][ticket] for table in tables) for ticket in real}
    common, how_many = Counter(shapes.values()).most_common(1)[0]
    return next(t for t in reversed(real) if shapes[t] == common), how_many


def _references() -> list[tuple[str, str, str, str, str]]:
    """(table, what, lateral FROM item or '', SQL of the referenced id over ``s``, referenced table)
    for every reference the bulk copy rewrites."""
    out = []
    for table, rewrites in CLONED.items():
        for column, rewrite in rewrites.items():
            if isinstance(rewrite, Ref):
                out.append((table, column, "", f's."{column}"', rewrite.table))
            elif isinstance(rewrite, RefList):
                lateral = f', jsonb_array_elements_text(s."{column}") AS e(v)'
                out.append((table, f"{column}[]", lateral, "e.v::bigint", rewrite.table))
            elif isinstance(rewrite, JsonKeys):
                for key, inner in rewrite.keys.items():
                    if isinstance(inner, Ref):
                        out.append((table, f"{column}.{key}", "", f"(s.\"{column}\"->>'{key}')::bigint", inner.table))
                    elif isinstance(inner, RefList):
                        lateral = f", jsonb_array_elements_text(s.\"{column}\"->'{key}') AS e(v)"
                        out.append((table, f"{column}.{key}[]", lateral, "e.v::bigint", inner.table))
    out.append(("tickets_ticketevent", "actor_ref", "", RUN_ACTOR.format(row="s"), "agents_agentrun"))
    return out


def _check_references(cursor: Any, groups: dict[str, list[int]]) -> dict[str, dict[str, int]]:
    """For every rewritten reference: how many each group's rows hold, and how many of those point
    at no row or at a row of another ticket (must be none). The copies must hold as many per
    ticket as the template."""
    counts: dict[str, dict[str, int]] = {}
    for table, what, lateral, value, target in _references():
        label = f"{table}.{what}"
        for group, ids in groups.items():
            if not ids:
                continue
            cursor.execute(
                f"""
                SELECT count(x.v), count(*) FILTER (WHERE x.v IS NOT NULL AND d.owner IS DISTINCT FROM x.ticket)
                  FROM (SELECT {_ticket_of(table, "s")} AS ticket, {value} AS v FROM {table} s{lateral}
                         WHERE {_ticket_of(table, "s")} = ANY(%s)) x
                  LEFT JOIN (SELECT id, {_ticket_of(target, "d")} AS owner FROM {target} d) d ON d.id = x.v
                """,  # noqa: S608 - names from CLONED
                [ids],
            )
            held, stray = cursor.fetchone()
            if stray:
                raise BenchError(f"{stray} of {held} {label} of the {group} pauses point at another ticket's rows")
            counts.setdefault(label, {})[group] = held
    copies = len(groups.get("bulk", []))
    for label, held in counts.items():
        if copies and held["bulk"] != held["template"] * copies:
            raise BenchError(f"{label}: the copies hold {held['bulk']}, the template {held['template']} x {copies}")
    return counts


def _conversation(ticket_id: int) -> str:
    """Every request the ticket's steps sent and every run's conversation, rebuilt from the ledger
    (agents.conversation), with the ticket's own number taken out."""
    from agents.conversation import build_conversation, request_of
    from agents.models import AgentRun, ModelStep

    runs = AgentRun.objects.filter(ticket_id=ticket_id).order_by("id")
    steps = ModelStep.objects.filter(ticket_id=ticket_id).order_by("run_id", "index", "attempt")
    everything = [request_of(step) for step in steps] + [build_conversation(run) for run in runs]
    return json.dumps(everything, sort_keys=True).replace(f"Ticket #{ticket_id}:", "Ticket #N:")


def verify_pauses(real: list[int], cloned: list[int], template: int, tables: list[str]) -> dict[str, Any]:
    """Every ticket paused on its refund; rows per ticket of the real pauses, of the template and of
    the copies, table by table (each copy must have the template's); references within each ticket."""
    from django.db import connection

    from agents.models import AgentRun, CallStatus, RunStatus, ToolCall
    from agents.tasks import tickets_needing_a_ring
    from approvals.models import ApprovalRequest, ApprovalStatus
    from tickets.models import Ticket, TicketStatus

    everyone = real + cloned
    paused = {
        "runs waiting_approval": AgentRun.objects.filter(ticket_id__in=everyone, status=RunStatus.WAITING_APPROVAL),
        "tickets pending_approval": Ticket.objects.filter(pk__in=everyone, status=TicketStatus.PENDING_APPROVAL),
        "approvals pending": ApprovalRequest.objects.filter(ticket_id__in=everyone, status=ApprovalStatus.PENDING),
        "refund calls awaiting_approval": ToolCall.objects.filter(
            ticket_id__in=everyone, name="issue_refund", status=CallStatus.AWAITING_APPROVAL
        ),
    }
    counts = {what: rows.count() for what, rows in paused.items()}
    if any(n != len(everyone) for n in counts.values()):
        raise BenchError(f"{len(everyone)} pauses: {counts}")
    if set(tickets_needing_a_ring(limit=len(everyone) + 500)) & set(everyone):
        raise BenchError("the sweeper would ring paused tickets")
    groups = {"real": real, "template": [template], "bulk": cloned}
    per_ticket: dict[str, dict[str, float]] = {}
    with connection.cursor() as cursor:
        for table in tables:
            row = {}
            for name, ids in groups.items():
                if not ids:
                    continue
                rows = _rows_per_ticket(cursor, table, ids)
                row[name] = sum(rows.values()) / len(ids)
                if name == "bulk" and set(rows.values()) != {row["template"]}:
                    raise BenchError(
                        f"{table}: copies have {sorted(set(rows.values()))} rows each, the template {row['template']:g}"
                    )
            per_ticket[table] = row
        references = _check_references(cursor, groups)
        cursor.execute(
            "SELECT count(*) FROM agents_toolcall c JOIN agents_modelstep s ON s.id = c.step_id "
            "WHERE c.ticket_id = ANY(%s) AND c.idempotency_key !~ ('^' || format('t%%s-r%%s-s%%s-c%%s', "
            "c.ticket_id, c.run_id, s.index, c.index) || '-[0-9a-f]{8}$')",
            [everyone],
        )
        wrong_keys = cursor.fetchone()[0]
    if wrong_keys:
        raise BenchError(f"{wrong_keys} tool calls have an idempotency key agents.calls would not give them")
    if cloned:
        for copy in {cloned[0], cloned[-1]}:
            if _conversation(copy) != _conversation(template):
                raise BenchError(f"ticket {copy}, a copy of {template}, rebuilds another conversation")
    return {"paused": counts, "rows_per_ticket": per_ticket, "references": references}


# --- the part ----------------------------------------------------------------------------------------


def run(ctx: Context, cluster: Any, base_url: str) -> PartResult:
    from django.conf import settings

    args = ctx.args
    part = PartResult("waiting")
    n = args.paused
    n_real = min(max(1, args.paused_real), n)
    sweep_seconds = float(settings.AGENT_SWEEP_SECONDS)
    prepare()
    idle = _sample(base_url, args.samples)
    tables = _user_tables()
    rows_before = _table_rows(tables)
    size_before = _sizes(tables)
    procs_before = _processes(cluster)
    sweeper_before = _sweeper_ms()

    t0 = time.perf_counter()
    real_records = pause_real(base_url, n_real)
    real_seconds = time.perf_counter() - t0
    real = [r["ticket_id"] for r in real_records]
    rows_mid = _table_rows(tables)
    size_mid = _sizes(tables)
    written = tables_written(rows_before, rows_mid)
    template, typical = template_of(real, sorted(written))
    cloned: list[int] = []
    bulk_seconds = 0.0
    if n > n_real:
        t1 = time.perf_counter()
        cloned = pause_bulk(template, n - n_real, written)
        bulk_seconds = time.perf_counter() - t1
    checked = verify_pauses(real, cloned, template, sorted(written))
    rows_after = _table_rows(tables)

    # Let beat run its sweeper over them at least once before looking.
    time.sleep(sweep_seconds + 1)
    size_after = _sizes(sorted(written))
    procs_after = _processes(cluster)
    sweeper_after = _sweeper_ms()
    queued = redis_queue_length(settings.WORKER_QUEUE)
    busy = _sample(base_url, args.samples)

    db_bytes = (size_after["database"] - size_before["database"]) / n
    written_sorted = sorted(written)
    tables_before = sum(size_before["tables"].get(t, 0) for t in written_sorted)
    tables_after = size_after["tables_total"]
    table_bytes = (tables_after - tables_before) / n
    real_table_bytes = (sum(size_mid["tables"].get(t, 0) for t in written_sorted) - tables_before) / n_real
    idle_lat = latency_summary([s["latency_ms"] for s in idle])
    busy_lat = latency_summary([s["latency_ms"] for s in busy])
    workers_before = {k: v for k, v in procs_before.items() if k.startswith("worker")}
    workers_after = {k: v for k, v in procs_after.items() if k.startswith("worker")}
    rss_before = sum(v["rss_bytes"] for v in workers_before.values())
    rss_after = sum(v["rss_bytes"] for v in workers_after.values())
    n_before = sum(v["processes"] for v in workers_before.values())
    n_after = sum(v["processes"] for v in workers_after.values())
    pause_lat = latency_summary([r["latency_ms"] for r in real_records])
    workers = len(cluster.workers())
    rows_each = sum(checked["rows_per_ticket"][t]["template"] for t in written)
    creation = (
        f"{n_real:,} paused through {workers} worker processes in {real_seconds:.1f} s "
        f"({n_real / real_seconds:.1f}/s; POST -> paused p50 {pause_lat['p50_ms']:.0f} ms)"
    )
    if cloned:
        creation += f", {len(cloned):,} copied from one of them ({rows_each:g} rows each) in {bulk_seconds:.1f} s"
    part.raw.update(
        {
            "paused": n,
            "paused_through_workers": n_real,
            "paused_bulk_copy": len(cloned),
            "workers": workers,
            "pausing_in_flight": PAUSE_IN_FLIGHT,
            "through_workers_seconds": real_seconds,
            "through_workers_per_second": n_real / real_seconds,
            "post_to_paused": pause_lat,
            "bulk_copy_seconds": bulk_seconds,
            "bulk_copy_template_ticket": template,
            "real_pauses_shaped_as_template": typical,
            "creation": creation,
            "refund": {
                "customer": REFUND_CUSTOMER,
                "order": REFUND_ORDER,
                "amount_cents": REFUND_CENTS,
                "message": REFUND_BODY,
            },
            "tables_written": written_sorted,
            "paused_rows": checked["paused"],
            "rows_per_paused_ticket": checked["rows_per_ticket"],
            "references_per_group": checked["references"],
            "rows_added": {t: rows_after[t] - rows_before[t] for t in written_sorted},
            "sizes_before": size_before,
            "sizes_after_real_path": size_mid,
            "sizes_after": size_after,
            "database_bytes_per_paused_ticket": db_bytes,
            "table_bytes_per_paused_ticket": table_bytes,
            "table_bytes_per_paused_ticket_through_workers_only": real_table_bytes,
            "processes_before": procs_before,
            "processes_after": procs_after,
            "sweeper_query_before": sweeper_before,
            "sweeper_query_after": sweeper_after,
            "sweep_seconds": sweep_seconds,
            "lease_seconds": settings.AGENT_LEASE_SECONDS,
            "worker_queue_length_after": queued,
            "new_ticket_idle": {"latency": idle_lat, "samples": idle},
            "new_ticket_with_paused": {"latency": busy_lat, "samples": busy},
        }
    )
    part.add("waiting_creation_s", f"Waiting: create {n:,} paused tickets", real_seconds + bulk_seconds, "s", creation)
    part.add(
        "waiting_worker_processes",
        "Waiting: worker processes before -> after",
        n_after,
        "processes",
        f"{n_before} before; beat and web unchanged: "
        f"{procs_before.get('beat', {}).get('processes')} -> {procs_after.get('beat', {}).get('processes')}",
        0,
    )
    part.add(
        "waiting_worker_rss_mib",
        "Waiting: worker RSS (all workers) after",
        mib(rss_after),
        "MiB",
        f"{mib(rss_before):.1f} MiB before ({mib(rss_after - rss_before):+.1f} MiB)",
    )
    part.add(
        "waiting_db_bytes_per_ticket",
        "Waiting: database bytes per paused ticket",
        db_bytes,
        "bytes",
        f"pg_database_size delta / {n:,}; tables written: {table_bytes:,.0f} B/ticket "
        f"(through workers alone: {real_table_bytes:,.0f}, incl. dead row versions)",
        0,
    )
    part.add(
        "waiting_sweeper_ms",
        "Waiting: sweeper query with them paused",
        sweeper_after["median_ms"],
        "ms",
        f"{sweeper_before['median_ms']:.1f} ms with none; rings {sweeper_after['tickets_to_ring']}; "
        f"{queued} doorbells queued; sweep every {sweep_seconds:g} s",
        2,
    )
    part.add(
        "waiting_new_ticket_idle_p50_ms",
        "Waiting: new ticket POST -> reply, none paused (p50)",
        idle_lat["p50_ms"],
        "ms",
        f"{args.samples} tickets one at a time; p99 {idle_lat['p99_ms']:.0f}",
        0,
    )
    ratio = busy_lat["p50_ms"] / idle_lat["p50_ms"] if idle_lat.get("p50_ms") else None
    part.add(
        "waiting_new_ticket_paused_p50_ms",
        f"Waiting: new ticket POST -> reply, {n:,} paused (p50)",
        busy_lat["p50_ms"],
        "ms",
        f"{ratio:.2f} x none paused; p99 {busy_lat['p99_ms']:.0f}" if ratio else "",
        0,
    )
    return part
