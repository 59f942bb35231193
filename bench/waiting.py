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

- through the real path: in this process, ``tickets.services.ticket_open`` then
  ``agents.runner.advance`` with a scripted model that asks for ``issue_refund`` of
  $649.00 on order B-2001 (bob's; above the approval threshold of $200) straight
  away, as tests/approvals/test_with_workers.py does. On a 2-core machine this is a few
  per second, so by default only ``--paused-real`` (500) go this way, and
- the rest by bulk copy: ``INSERT ... SELECT`` of the rows of one ticket the real path
  paused, with new ids and every reference rewritten (ticket, message, run, step, call,
  approval ids, also inside JSON payloads; the idempotency key recomputed as the real
  path computes it). It refuses to run if the real path wrote to a table it does not
  copy or a column refers to a copied row it does not rewrite, and checks that the
  copies have the same rows per ticket, table by table, as the original.

``--paused-real`` equal to ``--paused`` makes every pause through the real path.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench import throughput
from bench.common import DEMO_QUESTIONS, Context, PartResult, latency_summary, mib, redis_queue_length
from bench.overhead import BenchError

REFUND_ORDER = "B-2001"  # bob's espresso machine, $649.00: above the default approval threshold ($200)
REFUND_CUSTOMER = "bob"
REFUND_CENTS = 64900
REFUND_BODY = "Please refund my order B-2001, $649"


class ScriptedRefund:
    """A model that asks for the refund at once, whatever was said (as ScriptedRefund in the tests)."""

    name = "bench-scripted-refund"

    def complete(self, *, messages: list[dict[str, Any]], tools: list[Any], on_token: Any = None) -> Any:
        from agents.llm import ModelResponse, ToolCallRequest

        if not any(m["role"] == "tool" for m in messages):
            arguments = f'{{"order_number": "{REFUND_ORDER}", "amount_cents": {REFUND_CENTS}}}'
            return ModelResponse(text="", tool_calls=[ToolCallRequest("r1", "issue_refund", arguments)])
        return ModelResponse(text="Done.")


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


# --- pausing: the real path -------------------------------------------------------------------------


def pause_real(count: int) -> list[int]:
    from agents.models import RunStatus
    from agents.runner import advance
    from tickets import services as ticket_services
    from tickets.models import Customer

    customer = Customer.objects.select_related("user").get(user__username=REFUND_CUSTOMER)
    model = ScriptedRefund()
    ids = []
    for _ in range(count):
        ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=REFUND_BODY)
        outcome = advance(ticket.pk, model=model)
        if outcome.state != RunStatus.WAITING_APPROVAL:
            raise BenchError(f"ticket {ticket.pk}: advance ended {outcome.state!r}, not waiting_approval")
        ids.append(ticket.pk)
    return ids


# --- pausing: bulk copies of a ticket the real path paused -----------------------------------------

# Copied tables, in foreign-key order, and the columns rewritten in each copy (the others
# are copied as they are). ``m`` is a row of the id map, ``t`` the template's row.
CLONED = {
    "tickets_ticket": {"id": "m.ticket", "client_ref": "NULL"},
    "tickets_message": {"id": "m.message", "ticket_id": "m.ticket", "client_msg_id": "NULL"},
    "agents_agentrun": {"id": "m.run", "ticket_id": "m.ticket", "input_message_ids": "jsonb_build_array(m.message)"},
    "agents_modelstep": {
        "id": "m.step",
        "ticket_id": "m.ticket",
        "run_id": "m.run",
        "request_prefix_id": "NULL",  # the template's one step is the first of its pass: no prefix
        "request_messages": "replace(t.request_messages::text, %(ticket_tag)s, 'Ticket #' || m.ticket || ':')::jsonb",
    },
    "agents_toolcall": {
        "id": "m.call",
        "ticket_id": "m.ticket",
        "run_id": "m.run",
        "step_id": "m.step",
        # agents.calls.idempotency_key: t{ticket}-r{run}-s{step index}-c{call index}
        "idempotency_key": "format('t%%s-r%%s-s%%s-c%%s', m.ticket, m.run, %(step_index)s, t.index)",
    },
    "approvals_approvalrequest": {"id": "m.approval", "ticket_id": "m.ticket", "tool_call_id": "m.call"},
    "agents_ticketlease": {"ticket_id": "m.ticket"},
    "tickets_ticketevent": {
        "id": None,  # a new id from the column's default
        "ticket_id": "m.ticket",
        "actor_ref": "CASE WHEN t.actor_ref = %(run_ref)s THEN 'run:' || m.run ELSE t.actor_ref END",
        "payload": "t.payload || jsonb_strip_nulls(jsonb_build_object("
        "'message_id', CASE WHEN t.payload ? 'message_id' THEN m.message END, "
        "'run_id', CASE WHEN t.payload ? 'run_id' THEN m.run END, "
        "'call_id', CASE WHEN t.payload ? 'call_id' THEN m.call END, "
        "'approval_id', CASE WHEN t.payload ? 'approval_id' THEN m.approval END, "
        "'messages', CASE WHEN t.payload ? 'messages' THEN jsonb_build_array(m.message) END))",
    },
}
TEMPLATE_KEY = {"tickets_ticket": "id"}  # the others are found by ticket_id
ID_MAP = {
    "ticket": "tickets_ticket",
    "message": "tickets_message",
    "run": "agents_agentrun",
    "step": "agents_modelstep",
    "call": "agents_toolcall",
    "approval": "approvals_approvalrequest",
}


def _columns(cursor: Any, table: str) -> list[str]:
    cursor.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = %s "
        "AND is_generated = 'NEVER' ORDER BY ordinal_position",
        [table],
    )
    return [row[0] for row in cursor.fetchall()]


def _check_clonable(cursor: Any, written: set[str]) -> None:
    """Refuse if the real path wrote tables we do not copy, or a column points at a copied row we do not rewrite."""
    unknown = written - set(CLONED)
    if unknown:
        raise BenchError(
            f"the real path wrote {sorted(unknown)}, which the bulk copy does not know; "
            "use --paused-real equal to --paused"
        )
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
    for table, column, target in cursor.fetchall():
        if column not in CLONED[table]:
            raise BenchError(f"{table}.{column} refers to {target}, but the bulk copy does not rewrite it")


def pause_bulk(template_id: int, count: int, written: set[str]) -> list[int]:
    """``count`` copies of the rows of ``template_id`` (paused by the real path); returns the new ticket ids."""
    from django.db import connection, transaction

    from agents.models import AgentRun, ModelStep, ToolCall
    from approvals.models import ApprovalRequest
    from tickets.models import Message

    run = AgentRun.objects.get(ticket_id=template_id)
    step = ModelStep.objects.get(ticket_id=template_id)
    message = Message.objects.get(ticket_id=template_id)
    ToolCall.objects.get(ticket_id=template_id)
    ApprovalRequest.objects.get(ticket_id=template_id)
    if run.input_message_ids != [message.pk]:
        raise BenchError(f"template ticket {template_id}: unexpected input messages {run.input_message_ids}")
    params = {
        "template": template_id,
        "ticket_tag": f"Ticket #{template_id}:",
        "step_index": step.index,
        "run_ref": f"run:{run.pk}",
        "count": count,
    }
    with transaction.atomic(), connection.cursor() as cursor:
        _check_clonable(cursor, written)
        sequences = ", ".join(
            f"nextval(pg_get_serial_sequence('{table}', 'id')) AS {name}" for name, table in ID_MAP.items()
        )
        cursor.execute("DROP TABLE IF EXISTS bench_clone_map")
        cursor.execute(
            f"CREATE TEMP TABLE bench_clone_map ON COMMIT DROP AS "
            f"SELECT g, {sequences} FROM generate_series(1, %(count)s) AS g",
            params,
        )
        for table, rewrites in CLONED.items():
            columns = [c for c in _columns(cursor, table) if rewrites.get(c, "") is not None]
            values = ", ".join(rewrites.get(c) or f't."{c}"' for c in columns)
            key = TEMPLATE_KEY.get(table, "ticket_id")
            names = ", ".join(f'"{c}"' for c in columns)
            cursor.execute(
                f"INSERT INTO {table} ({names}) SELECT {values} "  # noqa: S608 - names from information_schema
                f"FROM bench_clone_map m CROSS JOIN {table} t WHERE t.{key} = %(template)s ORDER BY m.g",
                params,
            )
        cursor.execute("SELECT ticket FROM bench_clone_map ORDER BY g")
        return [row[0] for row in cursor.fetchall()]


def verify_pauses(real: list[int], cloned: list[int], tables: list[str]) -> dict[str, Any]:
    """Rows per ticket of the real path's pauses and of the copies, table by table; they must match."""
    from django.db import connection

    from agents.calls import idempotency_key
    from agents.models import AgentRun, RunStatus, ToolCall
    from agents.tasks import tickets_needing_a_ring
    from approvals.models import ApprovalRequest, ApprovalStatus

    everyone = real + cloned
    runs = AgentRun.objects.filter(ticket_id__in=everyone, status=RunStatus.WAITING_APPROVAL).count()
    pending = ApprovalRequest.objects.filter(ticket_id__in=everyone, status=ApprovalStatus.PENDING).count()
    if runs != len(everyone) or pending != len(everyone):
        raise BenchError(f"{len(everyone)} pauses: {runs} runs waiting, {pending} approvals pending")
    if set(tickets_needing_a_ring(limit=len(everyone) + 500)) & set(everyone):
        raise BenchError("the sweeper would ring paused tickets")
    per_ticket: dict[str, dict[str, float]] = {}
    with connection.cursor() as cursor:
        for table in tables:
            key = TEMPLATE_KEY.get(table, "ticket_id")
            row = {}
            for name, ids in (("real", real), ("bulk", cloned)):
                if ids:
                    cursor.execute(f"SELECT count(*) FROM {table} WHERE {key} = ANY(%s)", [ids])  # noqa: S608
                    row[name] = cursor.fetchone()[0] / len(ids)
            per_ticket[table] = row
    mismatched = {t: r for t, r in per_ticket.items() if len(set(r.values())) > 1}
    if mismatched:
        raise BenchError(f"bulk copies differ from the real path in rows per ticket: {mismatched}")
    if cloned:
        call = ToolCall.objects.select_related("step").get(ticket_id=cloned[-1])
        expected = idempotency_key(
            ticket_id=call.ticket_id, run_id=call.run_id, step_index=call.step.index, call_index=call.index
        )
        if call.idempotency_key != expected:
            raise BenchError(f"copied idempotency key {call.idempotency_key!r}, expected {expected!r}")
    return per_ticket


# --- the part ----------------------------------------------------------------------------------------


def run(ctx: Context, cluster: Any, base_url: str) -> PartResult:
    from django.conf import settings

    from approvals.models import ApprovalPolicy

    args = ctx.args
    part = PartResult("waiting")
    n = args.paused
    n_real = min(max(1, args.paused_real), n)
    sweep_seconds = float(settings.AGENT_SWEEP_SECONDS)
    ApprovalPolicy.current()  # its one row is made on first use: not a cost of any one pause
    idle = _sample(base_url, args.samples)
    tables = _user_tables()
    rows_before = _table_rows(tables)
    size_before = _sizes(tables)
    procs_before = _processes(cluster)
    sweeper_before = _sweeper_ms()

    t0 = time.perf_counter()
    real = pause_real(n_real)
    real_seconds = time.perf_counter() - t0
    rows_mid = _table_rows(tables)
    size_mid = _sizes(tables)
    written = {t for t in tables if rows_mid[t] != rows_before[t]}
    cloned: list[int] = []
    bulk_seconds = 0.0
    if n > n_real:
        t1 = time.perf_counter()
        cloned = pause_bulk(real[-1], n - n_real, written)
        bulk_seconds = time.perf_counter() - t1
    per_ticket_rows = verify_pauses(real, cloned, sorted(written))
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
    creation = f"{n_real} through the real path in {real_seconds:.1f} s ({n_real / real_seconds:.1f}/s)" + (
        f", {len(cloned)} by bulk copy of a real-path ticket's rows in {bulk_seconds:.1f} s" if cloned else ""
    )
    part.raw.update(
        {
            "paused": n,
            "paused_real_path": n_real,
            "paused_bulk_copy": len(cloned),
            "real_path_seconds": real_seconds,
            "real_path_per_second": n_real / real_seconds,
            "bulk_copy_seconds": bulk_seconds,
            "creation": creation,
            "refund": {"customer": REFUND_CUSTOMER, "order": REFUND_ORDER, "amount_cents": REFUND_CENTS},
            "tables_written": written_sorted,
            "rows_per_paused_ticket": per_ticket_rows,
            "rows_added": {t: rows_after[t] - rows_before[t] for t in written_sorted},
            "sizes_before": size_before,
            "sizes_after_real_path": size_mid,
            "sizes_after": size_after,
            "database_bytes_per_paused_ticket": db_bytes,
            "table_bytes_per_paused_ticket": table_bytes,
            "table_bytes_per_paused_ticket_real_path_only": real_table_bytes,
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
        f"(real path alone: {real_table_bytes:,.0f}, incl. dead row versions)",
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
