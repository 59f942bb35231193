"""A tool call under a time bound: AGENT_TOOL_TIMEOUT_SECONDS.

A tool's handler (or a reconcile hook asking what happened under a call's key) runs in a thread of
its own, on a database connection of its own, while the pass waits for it at most the bound. One
that has not returned by then (a dependency that accepts and never answers, a lock, a custom tool's
bug) is given up: the pass raises ``ToolTimedOut``, which the loop treats like any crash of a tool,
by the call's replay policy (``agents.execution``): a safe call failed, a keyed call left tried and
settled by its idempotency key on the next pass, a never call uncertain and not repeated; the
failure is counted, backed off, and parked with a person at the limit. The worker is free again,
rather than held with the ticket's lease until Celery's soft time limit (600 s).

The thread given up cannot be stopped, so it is made harmless before the pass goes on:

- every statement it sends from then on is refused (an execute wrapper on its connection);
- its database session is ended (``pg_terminate_backend``, waited for): a transaction it had open
  rolls back and the row locks it held (a ticket's, a refund's) go with it; whatever it committed
  before, it committed before the pass settles the call, which therefore sees it;
- its handler holds its own copy of the lease (``Lease.lent``): nothing it learns later reaches
  the pass.

So it writes nothing to the ledger after the bound, and an effect it would start behind a fence
(``ToolContext.fenced``, as the email and refund tools do before they send) is not started. An
effect already under way in it (a request already sent) is what "may have happened" means: a keyed
call is settled by its key, a never call stays uncertain.

A handler called inside a transaction of the caller's (a test's, which wraps it all) runs where it
is called, unbounded: no other connection could read what that transaction holds.
"""

from __future__ import annotations

import copy
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections

from agents.lease import Lease

logger = logging.getLogger(__name__)

T = TypeVar("T")


class ToolTimedOut(Exception):
    """A tool call (or its reconcile hook) did not finish within AGENT_TOOL_TIMEOUT_SECONDS. Not an
    outage (``agents.outage``): a call that hangs is counted against the ticket's failures."""


class ToolGivenUp(Exception):
    """Raised in a tool's thread given up at its bound, at its next statement: it writes nothing more."""


def bound_seconds() -> float:
    return float(settings.AGENT_TOOL_TIMEOUT_SECONDS)


class _Job:
    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class _ToolThread:
    """One thread, reused call after call (its connection kept as the worker's is), until a call
    outlives its bound: it is then given up, and the next call gets a new thread."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.given_up = False
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.db: Any = None  # this thread's database connection (Django's wrapper)
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="tool-call", daemon=True)
        self.thread.start()
        self.ready.wait()

    def usable(self) -> bool:
        return not self.given_up and self.pid == os.getpid() and self.thread.is_alive()

    def _refuse_once_given_up(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any) -> Any:
        if self.given_up:
            raise ToolGivenUp(f"this tool call was given up after {bound_seconds():g} s; nothing more is written")
        return execute(sql, params, many, ctx)

    def _run(self) -> None:
        # A connection of its own, as the worker's is (never one lent by a pool, DB_POOL): its session
        # is ended when its call is given up, and it is closed as the worker's (WORKER_DB_CONN_MAX_AGE).
        caller = connections[DEFAULT_DB_ALIAS]
        own = copy.deepcopy(caller.settings_dict)
        own["OPTIONS"].pop("pool", None)
        # Told apart from the worker's own session where operators look (pg_stat_activity).
        name = own["OPTIONS"].get("application_name") or ""
        own["OPTIONS"]["application_name"] = f"{name} (tool calls)".strip()[:63]
        connections[DEFAULT_DB_ALIAS] = self.db = type(caller)(own, DEFAULT_DB_ALIAS)
        self.ready.set()
        try:
            while (job := self.jobs.get()) is not None:
                try:
                    with self.db.execute_wrapper(self._refuse_once_given_up):
                        job.result = job.fn()
                except BaseException as exc:  # noqa: BLE001 - handed to the caller, which raises it
                    job.error = exc
                finally:
                    self._tidy()
                    job.done.set()
                if self.given_up:
                    if job.error is not None:
                        logger.info("a tool call given up at its bound ended later with %r", job.error)
                    return
        finally:
            try:
                self.db.close()
            except Exception:  # noqa: BLE001 - a session ended by the pass that gave it up
                pass

    def _tidy(self) -> None:
        """As the worker's own connection between tasks: kept unless broken, old, or given up."""
        try:
            if self.given_up:
                self.db.close()
            else:
                self.db.close_if_unusable_or_obsolete()
        except Exception:  # noqa: BLE001 - a new one is opened for the next call
            logger.warning("could not tidy the tool thread's database connection", exc_info=True)

    def run(self, fn: Callable[[], T], seconds: float, what: str) -> T:
        job = _Job(fn)
        self.jobs.put(job)
        try:
            finished = job.done.wait(seconds)
        except BaseException:
            self.give_up()  # the pass is going down (a time limit, a shutdown): nothing runs on behind it
            raise
        if not finished:
            self.give_up()
            raise ToolTimedOut(f"{what} did not finish within {seconds:g} s (AGENT_TOOL_TIMEOUT_SECONDS); given up")
        if job.error is not None:
            raise job.error
        return job.result

    def give_up(self) -> None:
        """Refuse this thread's statements from now on, and end its database session (waited for)."""
        self.given_up = True
        self.jobs.put(None)  # a thread that finishes its call ends there
        raw = getattr(self.db, "connection", None)
        try:
            pid = raw.info.backend_pid if raw is not None and not raw.closed else None
        except Exception:  # noqa: BLE001 - no session to end
            pid = None
        if pid is None:
            return
        with connection.cursor() as cursor:
            # Waited for (up to 10 s): once it returns, all the thread ever committed is committed.
            if connection.pg_version >= 140000:
                cursor.execute("SELECT pg_terminate_backend(%s, 10000)", [pid])
            else:  # no timeout argument before PostgreSQL 14: asked, then watched until gone
                cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
                for _ in range(100):
                    cursor.execute("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %s)", [pid])
                    if not cursor.fetchone()[0]:
                        break
                    time.sleep(0.1)
        logger.warning("a tool call outlived its bound; its database session (%s) was ended", pid)


_local = threading.local()


def run_bounded(fn: Callable[[Lease | None], T], *, lease: Lease | None, what: str) -> T:
    """``fn(lease)`` in the calling thread's tool thread, waited for at most AGENT_TOOL_TIMEOUT_SECONDS;
    ``ToolTimedOut`` past it. ``fn`` is given a copy of ``lease`` (``Lease.lent``), whose news this
    lease takes back if it ends in time. ``what`` names the call in the error."""
    if connection.in_atomic_block:
        return fn(lease)
    runner: _ToolThread | None = getattr(_local, "runner", None)
    if runner is None or not runner.usable():
        runner = _local.runner = _ToolThread()
    lent = lease.lent() if lease is not None else None
    try:
        result = runner.run(lambda: fn(lent), bound_seconds(), what)
    except ToolTimedOut:
        raise
    except BaseException:
        if lease is not None and lent is not None and not runner.given_up:
            lease.taken_back(lent)
        raise
    if lease is not None and lent is not None:
        lease.taken_back(lent)
    return result
