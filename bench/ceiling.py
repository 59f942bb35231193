"""The ceiling: the raw commit rate of the same Postgres, on the same machine.

A single-row ``INSERT`` in its own transaction (autocommit), as fast as 1 and 2 clients
can go for a few seconds, on a scratch database (``bench_ceiling``). With ``pgbench``
(the one next to the server when the server is the embedded one, else the first on
PATH whose major version matches the server's, else any): ``pgbench -n -M prepared -f
insert.sql -c N -j N -T seconds``. Without it, an equivalent psycopg loop: one thread and
one autocommit connection per client, the same prepared INSERT. The output says which ran.

Every commit waits for its WAL flush unless the server says otherwise
(``synchronous_commit``, ``fsync``: reported), so this is close to what one disk flush
costs here; the other figures are put beside it as a ratio.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import Context, PartResult
from bench.overhead import BenchError

CEILING_DB = "bench_ceiling"
TABLE_SQL = "CREATE TABLE bench_commit (id bigserial PRIMARY KEY, payload text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"  # noqa: E501
INSERT_SQL = "INSERT INTO bench_commit (payload) VALUES ('x');"


def _major(version_text: str) -> int | None:
    match = re.search(r"(\d+)(?:\.\d+)?", version_text)
    return int(match.group(1)) if match else None


def _version_number(version_text: str) -> str:
    match = re.search(r"\(PostgreSQL\)\s+(\S+)", version_text)
    return match.group(1) if match else version_text


def find_pgbench(server_version: str, embedded: bool) -> tuple[str, str] | None:
    """(path, its --version line) of the pgbench to use, or None if there is none."""
    candidates: list[str] = []
    spec = importlib.util.find_spec("pgserver")  # found, not imported: importing it has side effects
    if spec is not None and spec.origin:
        bundled = Path(spec.origin).parent / "pginstall" / "bin" / "pgbench"
        if bundled.exists():
            candidates.append(str(bundled))
    on_path = shutil.which("pgbench")
    if on_path:
        candidates.insert(0 if not embedded else len(candidates), on_path)
    found: list[tuple[str, str]] = []
    for path in candidates:
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
        except OSError:
            continue
        if out.returncode == 0:
            found.append((path, out.stdout.strip()))
    server_major = _major(server_version)
    for path, version in found:
        if _major(version.split("(PostgreSQL)")[-1]) == server_major:
            return path, version
    return found[0] if found else None


def _pgbench(ctx: Context, path: str, clients: int, seconds: float, workdir: Path) -> dict[str, Any]:
    server = ctx.server
    script = workdir / "insert.sql"
    script.write_text(INSERT_SQL + "\n")
    argv = [
        path,
        "-n",
        "-M",
        "prepared",
        "-f",
        str(script),
        "-c",
        str(clients),
        "-j",
        str(clients),
        "-T",
        str(max(1, round(seconds))),
    ]
    if server.host:
        argv += ["-h", server.host]
    if server.port:
        argv += ["-p", server.port]
    if server.user:
        argv += ["-U", server.user]
    argv.append(CEILING_DB)
    env = None
    if server.password:
        import os

        env = {**os.environ, "PGPASSWORD": server.password}
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=seconds + 120)
    if out.returncode != 0:
        raise BenchError(f"pgbench failed ({out.returncode}): {out.stderr.strip()[-1000:]}")
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out.stdout)
    latency = re.search(r"latency average = ([\d.]+) ms", out.stdout)
    done = re.search(r"number of transactions actually processed: (\d+)", out.stdout)
    if tps is None:
        raise BenchError(f"could not read pgbench's output:\n{out.stdout}")
    return {
        "commits_per_second": float(tps.group(1)),
        "latency_avg_ms": float(latency.group(1)) if latency else None,
        "transactions": int(done.group(1)) if done else None,
        "argv": " ".join(a if a != server.password else "***" for a in argv),
        "output": out.stdout,
    }


def _psycopg_loop(ctx: Context, clients: int, seconds: float) -> dict[str, Any]:
    import psycopg

    counts = [0] * clients
    errors: list[BaseException] = []
    start = threading.Barrier(clients + 1)
    stop_at: list[float] = []

    def client(i: int) -> None:
        try:
            with psycopg.connect(ctx.server.conninfo(CEILING_DB), autocommit=True, prepare_threshold=0) as conn:
                start.wait()
                while time.perf_counter() < stop_at[0]:
                    conn.execute(INSERT_SQL)
                    counts[i] += 1
        except BaseException as exc:  # noqa: BLE001 - reported after the join
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    stop_at.append(time.perf_counter() + 3600)
    start.wait()
    began = time.perf_counter()
    stop_at[0] = began + seconds
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise BenchError(f"psycopg commit loop failed: {errors[0]}")
    total = sum(counts)
    return {
        "commits_per_second": total / elapsed,
        "latency_avg_ms": clients * elapsed * 1000 / total,
        "transactions": total,
    }


def run(ctx: Context) -> PartResult:
    part = PartResult("ceiling")
    args = ctx.args
    server = ctx.server
    tool = (
        None
        if args.ceiling_tool == "psycopg"
        else find_pgbench(ctx.postgres["server_version"], ctx.postgres["embedded"])
    )
    if args.ceiling_tool == "pgbench" and tool is None:
        raise BenchError("--ceiling-tool pgbench: no pgbench found (PATH, or pgserver's bundled one)")
    how = f"pgbench ({tool[1]}, {tool[0]})" if tool else "psycopg loop (no pgbench found)"
    part.raw.update({"how": how, "sql": INSERT_SQL, "seconds": args.ceiling_seconds, "runs": {}})
    server.recreate(CEILING_DB)
    try:
        import psycopg

        with psycopg.connect(server.conninfo(CEILING_DB), autocommit=True) as conn:
            conn.execute(TABLE_SQL)
        workdir = ctx.log_dir / "ceiling"
        workdir.mkdir(parents=True, exist_ok=True)
        rates: dict[str, float] = {}
        for clients in args.ceiling_clients:
            if tool:
                result = _pgbench(ctx, tool[0], clients, args.ceiling_seconds, workdir)
            else:
                result = _psycopg_loop(ctx, clients, args.ceiling_seconds)
            part.raw["runs"][str(clients)] = result
            rates[str(clients)] = result["commits_per_second"]
        part.raw["commits_per_second"] = rates
    finally:
        if not args.keep_databases:
            server.drop(CEILING_DB)

    pg = ctx.postgres
    settings = f"synchronous_commit={pg['synchronous_commit']}, fsync={pg['fsync']}"
    tool_name = f"pgbench {_version_number(tool[1])} -M prepared" if tool else "psycopg loop (no pgbench)"
    for clients in args.ceiling_clients:
        run_ = part.raw["runs"][str(clients)]
        part.add(
            f"ceiling_commits_per_s_{clients}",
            f"Ceiling: 1-row INSERT+COMMIT, {clients} client{'s' if clients > 1 else ''}",
            run_["commits_per_second"],
            "commits/s",
            f"{tool_name}, {args.ceiling_seconds:g} s; avg {run_['latency_avg_ms']:.2f} ms/commit; {settings}",
            0,
        )
    return part
