"""The parts that are commands of their own, run as they are and read back from their JSON:

- ``bench.overhead``: durable overhead of one agent turn beside DBOS and LangGraph
  (``python -m bench.overhead --turns N --json FILE``);
- ``bench.first_token``: message POST -> first streamed token over the WebSocket.

Each runs in a process of its own: both set Django up on scratch databases of their own,
which one process can do only once. Their output goes to a log under bench-results/.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, Context, PartResult
from bench.overhead import BenchError


def _env() -> dict[str, str]:
    """The caller's environment (DATABASE_URL, REDIS_URL, ...) without the settings of ``python -m bench``."""
    env = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE", "BENCH_QUEUE", "BENCH_DATABASE"}}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _stop(proc: subprocess.Popen[bytes]) -> None:
    # SIGINT, not SIGTERM: both commands clean up (processes, scratch databases) in `finally` blocks.
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _run(argv: list[str], log: Path, timeout: float) -> None:
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=_env(), stdout=out, stderr=subprocess.STDOUT)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            raise BenchError(f"{' '.join(argv[2:4])} did not finish in {timeout:g} s; see {log}") from None
        except BaseException:  # interrupted: it stops too, and cleans up after itself
            _stop(proc)
            raise
    if code != 0:
        tail = log.read_text(errors="replace")[-2500:]
        raise BenchError(f"{' '.join(argv[2:4])} exited with {code}; see {log}:\n{tail}")


# --- durable overhead of a turn ------------------------------------------------------------------------


def _per_turn(system: dict[str, Any]) -> str:
    """What one turn of a side sent and wrote: SQL statements counted in psycopg (median), write
    transactions read server-wide (minimum), the same way for every side."""
    statements, xids = system.get("statements_per_turn_median"), system.get("xids_per_turn_min")
    return (
        f"{statements if statements is not None else '?'} statements, {xids if xids is not None else '?'} xids per turn"
    )


def run_overhead(ctx: Context) -> PartResult:
    part = PartResult("overhead")
    out = ctx.log_dir / "overhead.json"
    log = ctx.log_dir / "overhead.log"
    argv = [sys.executable, "-m", "bench.overhead", "--turns", str(ctx.args.turns), "--json", str(out)]
    if ctx.args.tool_calls is not None:
        argv += ["--tool-calls", str(ctx.args.tool_calls)]
    if ctx.args.keep_databases:
        argv.append("--keep-databases")
    part.raw["argv"] = shlex.join(argv[1:])
    _run(argv, log, timeout=1800)
    report = json.loads(out.read_text())
    part.raw["report"] = report
    part.raw["log"] = str(log)
    systems = {s["key"]: s for s in report["systems"]}
    ours = systems["ours"]
    calls = report["tool_calls"]
    stmts = report.get("ours_statements_per_advance") or {}
    ceiling = ctx.ceiling(1)
    notes = f"{_per_turn(ours)}; p50 {ours['p50_ms']:.1f}, p95 {ours['p95_ms']:.1f}"
    if ceiling:
        # How many raw commits of the ceiling fit in one turn, and the most turns/s if a turn cost only its commits.
        notes += f"; the time of {ours['mean_ms'] * ceiling / 1000:.0f} ceiling commits (1 client)"
        xids = ours.get("xids_per_turn_min")
        if xids:
            # Write transactions as the server counted them (a step sent as one statement is one too).
            notes += f"; its {xids:.0f} write transactions alone would allow <= {ceiling / xids:.0f} turns/s"
        if stmts.get("commits"):
            notes += f"; {stmts.get('COMMIT', 0)} COMMITs and {stmts.get('BEGIN', 0)} BEGINs sent"
    part.add(
        "overhead_ours_ms",
        f"Turn overhead: ours, advance() ({calls} tool calls)",
        ours["mean_ms"],
        "ms/turn (mean)",
        notes,
        2,
    )
    e2e = systems["ours_e2e"]
    part.add(
        "overhead_ours_e2e_ms",
        "Turn overhead: ours, message in + advance()",
        e2e["mean_ms"],
        "ms/turn (mean)",
        f"p50 {e2e['p50_ms']:.1f}, p95 {e2e['p95_ms']:.1f}",
        2,
    )
    for key, label in (
        ("dbos", "DBOS workflow"),
        ("langgraph_sync", "LangGraph, durability=sync"),
        ("langgraph_async", "LangGraph, durability=async (default)"),
    ):
        s = systems.get(key)
        if s is None:
            continue
        part.add(
            f"overhead_{key}_ms",
            f"Turn overhead: {label}",
            s["mean_ms"],
            "ms/turn (mean)",
            f"{s['ratio_to_ours']:.2f} x ours; {_per_turn(s)}; p50 {s['p50_ms']:.1f}, p95 {s['p95_ms']:.1f}",
            2,
        )
    part.raw["summary"] = f"{report['turns']} measured turns per system, {report['warmup']} warm-up"
    return part


# --- first token --------------------------------------------------------------------------------------


FIRST_TOKEN = ROOT / "bench" / "first_token.py"


def _find(obj: Any, names: tuple[str, ...], path: str = "") -> list[tuple[str, float]]:
    """(path, value) of every number under a key whose name contains one of ``names``."""
    found: list[tuple[str, float]] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            here = f"{path}.{key}" if path else str(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and any(n in str(key) for n in names):
                found.append((here, float(value)))
            else:
                found.extend(_find(value, names, here))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            found.extend(_find(value, names, f"{path}[{i}]"))
    return found


def run_first_token(ctx: Context) -> PartResult:
    part = PartResult("first_token")
    if not FIRST_TOKEN.exists():
        part.raw["gap"] = "bench/first_token.py is not in this checkout"
        part.add(
            "first_token_p50_ms",
            "First token: message POST -> first WebSocket token",
            None,
            "ms",
            "GAP: bench/first_token.py not in this checkout; not measured",
        )
        return part
    help_text = subprocess.run(
        [sys.executable, "-m", "bench.first_token", "--help"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    out = ctx.log_dir / "first_token.json"
    log = ctx.log_dir / "first_token.log"
    argv = [
        sys.executable,
        "-m",
        "bench.first_token",
        "--messages",
        str(ctx.args.first_token_messages),
        *shlex.split(ctx.args.first_token_args or ""),
    ]
    if "--json" in help_text:
        argv += ["--json", str(out)]
    if ctx.args.keep_databases and "--keep-database" in help_text:
        argv.append("--keep-database")
    part.raw["argv"] = shlex.join(argv[1:])
    started = time.perf_counter()
    _run(argv, log, timeout=1800)
    part.raw["seconds"] = time.perf_counter() - started
    part.raw["stdout"] = log.read_text(errors="replace")[-6000:]
    if not out.exists():
        part.raw["gap"] = "bench.first_token wrote no JSON (no --json option); see its output"
        part.add(
            "first_token",
            "First token: message POST -> first WebSocket token",
            None,
            "ms",
            f"ran, but no JSON to read figures from; see {log}",
        )
        return part
    report = json.loads(out.read_text())
    part.raw["report"] = report
    overall = (report.get("all") or {}).get("first_token")
    if overall and "p50_ms" in overall:
        kinds = ", ".join(
            f"{k['kind']} p50 {k['first_token']['p50_ms']:.0f}" for k in report.get("kinds", []) if "first_token" in k
        )
        part.add(
            "first_token_p50_ms",
            "First token: message POST -> first WebSocket token (p50)",
            overall["p50_ms"],
            "ms",
            f"{overall['n']} messages, one at a time; {kinds}",
            0,
        )
        part.add(
            "first_token_p99_ms",
            "First token: message POST -> first WebSocket token (p99)",
            overall["p99_ms"],
            "ms",
            f"max {overall['max_ms']:.0f} ms; bench.first_token: {report.get('stack', '')}",
            0,
        )
        return part
    # Another layout than the one this was written against: report whatever p50/p99 it has.
    figures = {"p50": _find(report, ("p50",)), "p99": _find(report, ("p99",))}
    if not figures["p50"]:
        part.add(
            "first_token",
            "First token: message POST -> first WebSocket token",
            None,
            "ms",
            f"no p50 in its JSON; see {out}",
        )
        return part
    for name in ("p50", "p99"):
        for path, value in figures[name][:3]:
            label = path.replace("_ms", "")
            part.add(
                f"first_token_{label}",
                f"First token ({label})",
                value,
                "ms",
                "message POST -> first streamed token over the WebSocket (bench.first_token)",
                1,
            )
    return part
