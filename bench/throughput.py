"""End-to-end throughput: N tickets opened over HTTP, answered by real worker processes.

The demo customers (alice, bob, carol) sign in through ``/accounts/login/`` and open
tickets through the customer web chat's form, ``POST /tickets/new/``, on a real daphne
server (DEBUG off), with a CSRF token as a browser sends it. Each asks "Where is my order
A-1001?" (an order of their own); the offline model (zero latency:
``OFFLINE_MODEL_TOKEN_DELAY_MS=0``) answers with one ``lookup_order`` call, then a reply.
``--workers`` Celery worker processes (``--pool=solo``, one task at a time each) and beat
run as separate processes, with the product's default settings.

Load (``--e2e-mode``):

- ``closed`` (default): ``--concurrency`` (4) customers in flight; each opens its next
  ticket as soon as the reply to its previous one is stored. With more in flight than
  workers, the workers never wait for work, and the latency includes a short queue;
- ``burst``: all N tickets posted at once (``--concurrency`` POSTs at a time); the
  latency is then mostly the wait behind the burst.

Reply stored = the ``created_at`` of the ticket's public agent Message row, written by the
worker on this machine's clock. One poller asks the database every 50 ms which replies are
in (to let a customer go on, and to know when all are), so the latency does not depend
on the poll interval. Per ticket: latency = reply stored - the moment its POST started.
Throughput = N / (last reply stored - first POST started). ``bench.waiting`` times single
tickets on an otherwise idle site.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.common import DEMO_QUESTIONS, Cluster, Context, Customer, PartResult, cpu_by_role, latency_summary
from bench.overhead import BenchError

POLL_SECONDS = 0.05


def replies_of(ticket_ids: list[int]) -> dict[int, float]:
    """Ticket id -> when its first public agent reply was stored (epoch seconds)."""
    from django.db.models import Min

    from tickets.models import AuthorKind, Message

    rows = (
        Message.objects.filter(ticket_id__in=ticket_ids, author_kind=AuthorKind.AGENT, is_public=True)
        .values("ticket_id")
        .annotate(first=Min("created_at"))
    )
    return {row["ticket_id"]: row["first"].timestamp() for row in rows}


async def _drive(
    base_url: str,
    bodies: list[tuple[str, str]],
    *,
    in_flight: int,
    closed: bool,
    timeout: float,
    done: Callable[[list[int]], dict[int, float]],
    signed_in: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """Open one ticket per (username, body) and wait until ``done`` says each is answered.

    closed: ``in_flight`` customers, each opening its next ticket once its previous one is
    done. Otherwise (burst): every ticket posted at once, ``in_flight`` POSTs at a time,
    then the answers awaited. One poller asks ``done`` about all tickets still waiting,
    every POLL_SECONDS, in a thread of its own; an exception it raises ends the drive.
    """
    loop = asyncio.get_running_loop()
    database = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bench-poller")
    customers = {name: Customer(base_url, name) for name in {u for u, _ in bodies}}
    waiting: dict[int, asyncio.Future[float]] = {}
    records: list[dict[str, Any]] = [{} for _ in bodies]
    futures: list[asyncio.Future[float] | None] = [None] * len(bodies)
    indexes = iter(range(len(bodies)))
    tag = uuid.uuid4().hex[:8]

    async def poller() -> None:
        while True:
            if waiting:
                stored = await loop.run_in_executor(database, done, list(waiting))
                for ticket_id, at in stored.items():
                    future = waiting.pop(ticket_id, None)
                    if future is not None and not future.done():
                        future.set_result(at)
            await asyncio.sleep(POLL_SECONDS)

    async def client() -> None:
        for i in indexes:  # shared: each index goes to one client
            username, body = bodies[i]
            ticket_id, started = await customers[username].open_ticket(body, client_ref=f"bench-{tag}-{i}")
            records[i] = {"ticket_id": ticket_id, "posted_at": started, "post_ms": (time.time() - started) * 1000}
            future = futures[i] = loop.create_future()
            waiting[ticket_id] = future
            if closed:
                await future

    async def everything() -> None:
        await asyncio.gather(*(client() for _ in range(in_flight)))
        await asyncio.gather(*(f for f in futures if f is not None))

    polling = asyncio.create_task(poller())
    driving: asyncio.Task[None] | None = None
    try:
        for customer in customers.values():
            await customer.login()
        if signed_in is not None:
            signed_in()  # what is measured starts here: a sign-in's password hashing is not a ticket's work
        driving = asyncio.create_task(everything())
        finished, _ = await asyncio.wait({driving, polling}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if polling in finished:
            polling.result()  # the poller stopped: raise what stopped it
        if driving not in finished:
            missing = sum(1 for f in futures if f is None or not f.done())
            raise BenchError(f"{missing} of {len(bodies)} tickets had no answer after {timeout:g} s")
        driving.result()
    finally:
        for task in (driving, polling):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for customer in customers.values():
            await customer.close()
        await loop.run_in_executor(database, _close_connections)
        database.shutdown()
    for record, future in zip(records, futures, strict=True):
        record["reply_at"] = future.result()
        record["latency_ms"] = (record["reply_at"] - record["posted_at"]) * 1000
    return records


def _close_connections() -> None:
    from django.db import connections

    connections.close_all()


def serve(
    base_url: str,
    bodies: list[tuple[str, str]],
    *,
    in_flight: int,
    closed: bool = True,
    timeout: float,
    done: Callable[[list[int]], dict[int, float]] = replies_of,
    signed_in: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """Open the tickets over HTTP; each result has ticket_id, posted_at, post_ms, reply_at, latency_ms.

    ``done`` (ticket ids -> when each was answered, epoch seconds) says what answered means:
    by default the first public agent reply stored. ``signed_in`` is called once the customers
    have signed in, before the first ticket is posted."""
    drive = _drive(
        base_url, bodies, in_flight=in_flight, closed=closed, timeout=timeout, done=done, signed_in=signed_in
    )
    return asyncio.run(drive)


def verify(ticket_ids: list[int]) -> dict[str, float]:
    """Every ticket answered once, by a completed run, after a successful lookup; rows per ticket."""
    from agents.models import AgentRun, CallStatus, ModelStep, RunStatus, ToolCall
    from tickets.models import AuthorKind, Message, TicketEvent

    n = len(ticket_ids)
    replies = Message.objects.filter(ticket_id__in=ticket_ids, author_kind=AuthorKind.AGENT).count()
    completed = AgentRun.objects.filter(ticket_id__in=ticket_ids, status=RunStatus.COMPLETED).count()
    lookups = ToolCall.objects.filter(ticket_id__in=ticket_ids, name="lookup_order", status=CallStatus.SUCCEEDED)
    if replies != n or completed != n or lookups.count() != n:
        raise BenchError(f"of {n} tickets: {replies} replies, {completed} completed runs, {lookups.count()} lookups")
    return {
        "ModelStep": ModelStep.objects.filter(ticket_id__in=ticket_ids).count() / n,
        "ToolCall": ToolCall.objects.filter(ticket_id__in=ticket_ids).count() / n,
        "TicketEvent": TicketEvent.objects.filter(ticket_id__in=ticket_ids).count() / n,
        "Message": Message.objects.filter(ticket_id__in=ticket_ids).count() / n,
    }


def run(ctx: Context, cluster: Cluster, base_url: str, workers: int) -> PartResult:
    args = ctx.args
    part = PartResult("e2e")
    names = sorted(DEMO_QUESTIONS)
    # Warm-up, not measured: first requests, first tasks, connections.
    serve(base_url, [(u, DEMO_QUESTIONS[u]) for u in names], in_flight=len(names), timeout=120)

    bodies = [(names[i % len(names)], DEMO_QUESTIONS[names[i % len(names)]]) for i in range(args.tickets)]
    start: dict[str, Any] = {}

    def signed_in() -> None:  # the sign-ins (password hashing, session rows) are not counted per ticket
        start.update(probe=ctx.server.probe(), cpu=cpu_by_role(cluster))

    closed = args.e2e_mode == "closed"
    results = serve(
        base_url,
        bodies,
        in_flight=args.concurrency,
        closed=closed,
        timeout=120 + 2 * args.tickets,
        signed_in=signed_in,
    )
    cpu_after = cpu_by_role(cluster)
    after = ctx.server.probe()
    before, cpu_before = start["probe"], start["cpu"]
    ids = [r["ticket_id"] for r in results]
    rows = verify(ids)

    first_post = min(r["posted_at"] for r in results)
    last_reply = max(r["reply_at"] for r in results)
    wall = last_reply - first_post
    rate = len(results) / wall
    lat = latency_summary([r["latency_ms"] for r in results])
    posts = latency_summary([r["post_ms"] for r in results])
    xids = (after.xid - before.xid) / len(results) if before.xid is not None and after.xid is not None else None
    wal = (after.wal - before.wal) / len(results) if before.wal is not None and after.wal is not None else None
    part.raw.update(
        {
            "tickets": len(results),
            "mode": args.e2e_mode,
            "in_flight": args.concurrency,
            "workers": workers,
            "worker_pool": "solo",
            "wall_seconds": wall,
            "tickets_per_second": rate,
            "latency": lat,
            "post_response": posts,
            "rows_per_ticket": rows,
            "xids_per_ticket_serverwide": xids,
            "wal_bytes_per_ticket_serverwide": wal,
            "reply_detection": "Message.created_at of the reply (worker clock); the database polled every "
            f"{POLL_SECONDS * 1000:.0f} ms to learn that it is there",
            "cpu_seconds_by_role": {role: cpu_after[role] - cpu_before[role] for role in cpu_after},
            "samples": results,
        }
    )
    clients = min(workers, 2) if ctx.ceiling(min(workers, 2)) else 1
    ceiling = ctx.ceiling(clients)
    load = f"{args.concurrency} customers in flight" if closed else f"one burst, {args.concurrency} POSTs at a time"
    notes = f"{len(results)} tickets in {wall:.1f} s; {workers} solo workers; {load}"
    if ceiling:
        notes += f"; ceiling ({clients} clients) is {ceiling / rate:.0f}x this"
        if xids:
            # Write transactions per ticket, counted server-wide: other activity on the server only adds.
            notes += f"; {xids:.0f} xids/ticket: commits alone would allow <= {ceiling / xids:.0f}/s"
    part.add("e2e_tickets_per_s", "E2E throughput: tickets opened over HTTP, answered", rate, "tickets/s", notes, 2)
    part.add(
        "e2e_latency_p50_ms",
        "E2E latency p50: POST -> reply stored",
        lat["p50_ms"],
        "ms",
        (
            f"{args.concurrency} in flight for {workers} workers, so it includes the queue"
            if closed
            else f"burst of {len(results)}: includes the queue behind it"
        )
        + f"; the POST itself p50 {posts['p50_ms']:.0f} ms",
        0,
    )
    part.add(
        "e2e_latency_p99_ms",
        "E2E latency p99: POST -> reply stored",
        lat["p99_ms"],
        "ms",
        f"max {lat['max_ms']:.0f} ms; reply = agent Message.created_at",
        0,
    )
    cpu = part.raw["cpu_seconds_by_role"]
    cores = os.cpu_count() or 1
    per_ticket = {role: 1000 * seconds / len(results) for role, seconds in cpu.items()}
    known = sum(v for role, v in per_ticket.items() if role != "machine")
    shares = ", ".join(f"{role} {per_ticket[role]:.1f}" for role in ("web", "workers", "postgres", "redis", "beat"))
    part.add(
        "e2e_cpu_ms_per_ticket",
        "E2E CPU per ticket, all cores",
        per_ticket["machine"],
        "ms CPU",
        f"{shares}, this benchmark {per_ticket['benchmark']:.1f}, other {per_ticket['machine'] - known:.1f}; "
        f"{cores} cores busy {100 * cpu['machine'] / (wall * cores):.0f}% of the run",
        1,
    )
    return part
