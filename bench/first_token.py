"""Time to first token in the customer's chat, through the whole real stack.

The command starts the stack itself: daphne (the ASGI web process) and one
Celery worker (prefork, concurrency 1), on a scratch database
``bench_first_token`` on the server of DATABASE_URL (dropped and created at
start, dropped at the end unless ``--keep-database``) and the Redis of
REDIS_URL, under a Celery queue, Channels prefix and streaming-buffer prefix
of its own (``bench/first_token_settings.py``). The model is the offline
deterministic one with no delay per token (OFFLINE_MODEL_TOKEN_DELAY_MS=0),
so what is measured is the product, not a model.

A demo customer (``seed_demo``'s alice) signs in through the login form. For
each message: POST ``/tickets/<id>/messages`` and time until the first
``token`` frame of the answer on the chat's WebSocket (timestamped by a reader
thread as it arrives); the answer's completion (the agent's message event) is
timed too. Two kinds of message, interleaved:

- ``direct``: ``bench:0``, which the offline model answers at once (one model
  step): web request, commit, doorbell through Redis, worker, lease, run, step;
- ``one tool call``: "What is your refund policy?", answered after a
  ``search_help`` call (two model steps, full-text search in between).

Every answer is checked: the streamed text equals the final message, and the
ledger holds one reply per message. Where the time goes is printed hop by hop
from the timestamps the stack writes in the ledger (the customer's message, the
run's start, the answering step's model call), on the client's clock: the web
request, the doorbell and the worker up to the run, the run up to the model
call, and the model call up to the token frame. A fresh ticket is opened every
``--per-ticket`` messages, so the conversation stays the length of a real one.

Run::

    DATABASE_URL=postgres://... REDIS_URL=redis://... python -m bench.first_token --messages 50
    python -m support.embedded -- python -m bench.first_token --messages 50     # embedded servers

The WebSocket client is the ``websockets`` package (pinned in requirements-bench.txt).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import queue
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.overhead import BenchError, Server, _git_revision, _table, close_connections, percentile

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = "bench.first_token_settings"
DATABASE = "bench_first_token"
KINDS = {"direct": "bench:0", "one tool call": "What is your refund policy?"}
DEMO_USER = "alice"


# --- the stack --------------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(name: str, argv: list[str], env: dict[str, str], log_dir: Path) -> Proc:
    log_path = log_dir / f"{name}.log"
    with log_path.open("wb") as log:
        popen = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return Proc(name, popen, log_path)


def _wait(what: str, ready: Any, proc: Proc, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise BenchError(f"{proc.name} exited with {proc.popen.returncode} before {what}:\n{proc.log()[-3000:]}")
        if ready():
            return
        time.sleep(0.1)
    raise BenchError(f"timed out waiting for {what}:\n{proc.log()[-3000:]}")


# --- the browser's side: HTTP session and WebSocket ---------------------------------------------


class Chat:
    """One signed-in customer: an HTTP session and a WebSocket per ticket, frames timestamped on arrival."""

    def __init__(self, base_url: str) -> None:
        import httpx

        self.base_url = base_url
        self.http = httpx.Client(base_url=base_url, trust_env=False, timeout=30, follow_redirects=False)
        self.frames: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()
        self.ws: Any = None
        self.reader: threading.Thread | None = None
        # The newest step whose answer this chat has seen as a message (later tokens of it are skipped).
        self.done_step = 0

    def sign_in(self, username: str, password: str) -> None:
        page = self.http.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        if token is None:
            raise BenchError("the login page has no CSRF token")
        response = self.http.post(
            "/accounts/login/",
            data={"username": username, "password": password, "csrfmiddlewaretoken": token[1], "next": "/tickets/"},
            headers={"Referer": self.base_url + "/accounts/login/"},
        )
        if response.status_code != 302:
            raise BenchError(f"signing in as {username} failed ({response.status_code})")

    def open_ticket(self, body: str) -> int:
        form = self.http.get("/tickets/new/").text
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)[1]
        client_ref = re.search(r'name="client_ref" value="([^"]+)"', form)[1]
        response = self.http.post(
            "/tickets/new/",
            data={"subject": "", "body": body, "client_ref": client_ref, "csrfmiddlewaretoken": token},
        )
        found = re.fullmatch(r"/tickets/(\d+)/", response.headers.get("location", ""))
        if response.status_code != 302 or found is None:
            raise BenchError(f"opening a ticket failed ({response.status_code})")
        return int(found[1])

    def csrf_token(self, ticket_id: int) -> str:
        page = self.http.get(f"/tickets/{ticket_id}/").text
        return re.search(r'<meta name="csrf-token" content="([^"]+)"', page)[1]

    def watch(self, ticket_id: int, after: int) -> None:
        from websockets.sync.client import connect

        self.close_socket()
        cookie = "; ".join(f"{k}={v}" for k, v in self.http.cookies.items())
        self.ws = connect(
            self.base_url.replace("http", "ws", 1) + f"/ws/tickets/{ticket_id}/?after={after}",
            origin=self.base_url,
            additional_headers={"Cookie": cookie},
            proxy=None,
            compression=None,
            max_queue=None,
        )
        self.frames = queue.Queue()
        ws, frames = self.ws, self.frames

        def read() -> None:
            with contextlib.suppress(Exception):
                for raw in ws:
                    frames.put((time.perf_counter(), json.loads(raw)))

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()

    def next_frame(self, timeout: float = 30) -> tuple[float, dict[str, Any]]:
        try:
            return self.frames.get(timeout=timeout)
        except queue.Empty:
            raise BenchError(f"no frame from the chat socket within {timeout}s") from None

    def post(self, ticket_id: int, token: str, body: str) -> str:
        """Send a message; returns its client message id."""
        client_msg_id = uuid.uuid4().hex
        response = self.http.post(
            f"/tickets/{ticket_id}/messages",
            json={"client_msg_id": client_msg_id, "body": body},
            headers={"X-CSRFToken": token, "Referer": f"{self.base_url}/tickets/{ticket_id}/"},
        )
        if response.status_code != 201:
            raise BenchError(f"sending failed ({response.status_code}): {response.text[:200]}")
        return client_msg_id

    def close_socket(self) -> None:
        if self.ws is not None:
            self.ws.close()
            self.reader.join(5)
            self.ws = None

    def close(self) -> None:
        self.close_socket()
        self.http.close()


@dataclass
class Turn:
    first_token_ms: float
    answer_ms: float
    streamed: str
    final: str
    final_stream: int | None
    # The answer's message event came before its first token frame (the socket was behind).
    tokens_after_message: bool = False


def await_answer(chat: Chat, sent_at: float, *, watched_from_the_start: bool = True) -> Turn:
    """Read frames until the agent's run ends and its answer has streamed; the first token frame
    of a new step is the first token. Token frames of a step the chat has already seen answered
    are old news and skipped, as the browser skips them. ``watched_from_the_start=False``: the
    socket connected after the message was sent, so the answer may have been streamed (and
    stored) before it did; no token frame is required."""
    first_token: float | None = None
    steps: dict[int, str] = {}
    final: str | None = None
    final_stream: int | None = None
    answered_at: float | None = None
    ended = False
    seen: list[tuple[float, dict[str, Any]]] = []
    while True:
        at, frame = chat.next_frame()
        seen.append((round((at - sent_at) * 1000, 1), frame))
        if frame["type"] == "token" and frame["step"] > chat.done_step:
            if first_token is None:
                first_token = at
            text = steps.get(frame["step"], "")
            if frame["offset"] <= len(text):
                steps[frame["step"]] = text[: frame["offset"]] + frame["text"]
        elif frame["type"] == "event" and frame.get("kind") == "message" and frame.get("author") == "agent":
            final, answered_at, final_stream = frame["text"], at, frame.get("stream")
        elif frame["type"] == "event" and frame.get("typing") is False and final is not None:
            ended = True
        if ended and (
            not watched_from_the_start or final_stream is None or len(steps.get(final_stream, "")) >= len(final)
        ):
            break
    if final_stream is not None:
        chat.done_step = max(chat.done_step, final_stream)
    if first_token is None and not watched_from_the_start:
        first_token = answered_at
    if first_token is None:
        shown = "; ".join(f"+{ms} ms {str(f)[:120]}" for ms, f in seen)
        raise BenchError(f"the answer came without a token frame; frames: {shown}")
    streamed = steps.get(final_stream, "") if final_stream is not None else (steps[max(steps)] if steps else "")
    return Turn(
        (first_token - sent_at) * 1000,
        (answered_at - sent_at) * 1000,
        streamed,
        final,
        final_stream,
        first_token > answered_at,
    )


# --- the run ------------------------------------------------------------------------------------


@dataclass
class Series:
    kind: str
    body: str
    first_token_ms: list[float] = field(default_factory=list)
    answer_ms: list[float] = field(default_factory=list)
    post_ms: list[float] = field(default_factory=list)
    sent: list[Sent] = field(default_factory=list)


@dataclass
class Sent:
    """One measured message, as the client saw it; ``hops`` places it in the ledger's timestamps."""

    ticket_id: int
    client_msg_id: str
    sent_wall: float  # time.time() when the POST went out
    first_token_ms: float
    final_stream: int | None
    hops: dict[str, float] = field(default_factory=dict)


# Where the time to the first token goes, from the timestamps the stack writes in the ledger
# (the web process, the worker and this client share one clock: the stack runs on this machine).
HOPS = [
    ("web: request to message row", "POST sent until the customer's message was stamped in the view (session, "
     "access check, rate limit)"),
    ("commit, doorbell, worker, lease", "until the worker stamped the run's start (commit, enqueue on commit, "
     "broker, task pickup, ticket read, lease, the run's select)"),
    ("run start to model call", "until the answering step asked the model (run row, pass load; with a tool call, "
     "the first step and the call too)"),
    ("model call to token frame", "until the first token frame arrived (first token, streaming buffer, channel "
     "layer, web consumer, socket)"),
]  # fmt: skip


def _place_in_ledger(sent: list[Sent]) -> None:
    """Fill each message's ``hops`` from the customer message's, the run's and the step's timestamps."""
    from agents.models import AgentRun, ModelStep
    from agents.pass_state import stream_position
    from tickets.models import Message

    messages = {
        (m.ticket_id, m.client_msg_id): m
        for m in Message.objects.filter(ticket_id__in={s.ticket_id for s in sent}, client_msg_id__isnull=False)
    }
    runs = {
        message_id: run
        for run in AgentRun.objects.filter(ticket_id__in={s.ticket_id for s in sent})
        for message_id in run.input_message_ids
    }
    steps = {
        (st.run_id, st.index, st.attempt): st.started_at
        for st in ModelStep.objects.filter(ticket_id__in={s.ticket_id for s in sent})
    }
    for s in sent:
        message = messages.get((s.ticket_id, s.client_msg_id))
        run = runs.get(message.pk) if message is not None else None
        asked = steps.get(stream_position(s.final_stream)) if s.final_stream is not None else None
        if message is None or run is None or asked is None:
            continue
        stamps = [s.sent_wall, message.created_at.timestamp(), run.started_at.timestamp(), asked.timestamp()]
        stamps.append(s.sent_wall + s.first_token_ms / 1000)
        s.hops = {
            name: (end - start) * 1000 for (name, _), start, end in zip(HOPS, stamps[:-1], stamps[1:], strict=True)
        }


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_ms": percentile(values, 0.50),
        "p90_ms": percentile(values, 0.90),
        "p99_ms": percentile(values, 0.99),
        "mean_ms": statistics.fmean(values),
        "min_ms": min(values),
        "max_ms": max(values),
    }


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("Django", "channels", "channels-redis", "daphne", "celery", "redis", "psycopg", "websockets"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.first_token", description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=50, help="measured messages of each kind (default 50)")
    parser.add_argument("--warmup", type=int, default=4, help="unmeasured messages first (default 4)")
    parser.add_argument("--per-ticket", type=int, default=10, help="messages per ticket before a new one (default 10)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench-results" / "first_token.json", help="JSON output")
    parser.add_argument("--keep-database", action="store_true", help="keep the scratch database at the end")
    args = parser.parse_args(argv)
    if args.messages < 1 or args.warmup < 0 or args.per_ticket < 1:
        parser.error("--messages and --per-ticket must be >= 1, --warmup >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    os.environ["BENCH_FIRST_TOKEN_DATABASE"] = DATABASE
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    from bench.environment import configure_loopback_stack

    # Production settings over plain HTTP on loopback (also when run on its own, not from bench).
    configure_loopback_stack(secret_key=os.environ.get("SECRET_KEY") or uuid.uuid4().hex * 2)

    import django
    from django.conf import settings

    base_db = dict(settings.DATABASES["default"], NAME=settings.BENCH_ADMIN_DATABASE)
    server = Server.from_django(base_db)
    if server.admin_db == DATABASE:
        raise BenchError(f"DATABASE_URL names {DATABASE!r}, the database this benchmark drops; use another")
    try:
        pg = server.settings()
    except Exception:  # noqa: BLE001 - DATABASE_URL may name a database not created yet
        server.close()
        server = Server.from_django(dict(base_db, NAME="postgres"))
        pg = server.settings()
    print(
        f"Postgres {pg['server_version']} at {server.host or 'localhost'}{':' + server.port if server.port else ''} "
        f"(scratch database {DATABASE}); fsync={pg['fsync']} synchronous_commit={pg['synchronous_commit']}"
    )
    print(f"Redis {settings.REDIS_URL.split('@')[-1]} (queue and prefixes {settings.BENCH_NAME!r})")
    server.recreate(DATABASE)
    django.setup()

    from django.core.management import call_command

    from tickets.demo import DEMO_PASSWORD, seed_demo

    call_command("migrate", verbosity=0, interactive=False)
    seed_demo()

    log_dir = Path(tempfile.mkdtemp(prefix="bench-first-token-"))
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    env = dict(os.environ)
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": SETTINGS,
            "BENCH_FIRST_TOKEN_DATABASE": DATABASE,
            "DATABASE_URL": settings.DATABASE_URL,
            "REDIS_URL": settings.REDIS_URL,
            "DEBUG": "0",
            "SECRET_KEY": os.environ.get("SECRET_KEY") or uuid.uuid4().hex * 2,
            "ALLOWED_HOSTS": "127.0.0.1",
            "AGENT_MODEL": "offline",
            "OFFLINE_MODEL_TOKEN_DELAY_MS": "0",
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        }
    )
    py = sys.executable
    procs: list[Proc] = []
    series = {kind: Series(kind, body) for kind, body in KINDS.items()}
    mismatches = 0
    late = 0  # answers whose message event reached the socket before their first token frame
    tickets: list[int] = []
    started = time.perf_counter()
    chat: Chat | None = None
    try:
        web = _start("web", [py, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "support.asgi:application"],
                     env, log_dir)  # fmt: skip
        procs.append(web)
        worker = _start("worker", [py, "-m", "celery", "-A", "support", "worker", "-l", "info", "--concurrency", "1",
                                   "-n", "bench-first-token@%h", "--without-gossip", "--without-mingle"],
                        env, log_dir)  # fmt: skip
        procs.append(worker)
        _wait("the worker to be ready", lambda: "ready." in worker.log(), worker)
        chat = Chat(base_url)

        def web_up() -> bool:
            with contextlib.suppress(Exception):
                return chat.http.get("/accounts/login/").status_code == 200
            return False

        _wait("the web process to answer", web_up, web)
        chat.sign_in(DEMO_USER, DEMO_PASSWORD)
        print(
            f"Stack: daphne on {base_url} and 1 Celery worker (prefork, concurrency 1); offline model, "
            f"no token delay. Logs: {log_dir}"
        )
        print(
            f"Warm-up: {args.warmup} messages; then {args.messages} measured messages of each kind, interleaved, "
            f"{args.per_ticket} per ticket ...",
            flush=True,
        )

        plan = [kind for _ in range(args.messages) for kind in KINDS]
        plan = [list(KINDS)[i % len(KINDS)] for i in range(args.warmup)] + plan
        ticket_id, token, in_ticket = 0, "", args.per_ticket
        for i, kind in enumerate(plan):
            if in_ticket >= args.per_ticket:
                ticket_id = chat.open_ticket("Hello, I have a few questions.")
                tickets.append(ticket_id)
                token = chat.csrf_token(ticket_id)
                chat.watch(ticket_id, after=0)
                # The opening message's answer, not measured (it may be done before the socket connects).
                await_answer(chat, time.perf_counter(), watched_from_the_start=False)
                in_ticket = 0
            sent_wall, sent_at = time.time(), time.perf_counter()
            client_msg_id = chat.post(ticket_id, token, KINDS[kind])
            posted_ms = (time.perf_counter() - sent_at) * 1000
            turn = await_answer(chat, sent_at)
            in_ticket += 1
            if turn.streamed != turn.final:
                mismatches += 1
            if i >= args.warmup:
                series[kind].first_token_ms.append(turn.first_token_ms)
                series[kind].answer_ms.append(turn.answer_ms)
                series[kind].post_ms.append(posted_ms)
                series[kind].sent.append(
                    Sent(ticket_id, client_msg_id, sent_wall, turn.first_token_ms, turn.final_stream)
                )
                late += turn.tokens_after_message
        replies = _count_replies(tickets)
        _place_in_ledger([s for one in series.values() for s in one.sent])
    finally:
        if chat is not None:
            chat.close()
        for proc in reversed(procs):
            proc.stop()
        _clean_redis(settings.REDIS_URL, settings.BENCH_NAME)
        close_connections()
        if not args.keep_database:
            with contextlib.suppress(Exception):
                server.drop(DATABASE)
        server.close()
    elapsed = time.perf_counter() - started

    expected = len(tickets) + len(plan)
    if replies != expected or mismatches:
        raise BenchError(
            f"{replies} replies for {expected} messages; {mismatches} streamed texts differ from the final"
        )
    sums = {
        kind: (_summary(s.first_token_ms), _summary(s.answer_ms), _summary(s.post_ms)) for kind, s in series.items()
    }
    print()
    print("Time from POST /tickets/<id>/messages to the answer's first token frame on the WebSocket, ms:")
    rows = [
        [kind, KINDS[kind], str(first["n"]), f"{first['p50_ms']:.1f}", f"{first['p90_ms']:.1f}",
         f"{first['p99_ms']:.1f}", f"{first['max_ms']:.1f}", f"{post['p50_ms']:.1f}", f"{answer['p50_ms']:.1f}"]
        for kind, (first, answer, post) in sums.items()
    ]  # fmt: skip
    headers = ["message", "body", "n", "p50", "p90", "p99", "max", "POST p50", "answer p50"]
    print(_table(headers, rows, right={2, 3, 4, 5, 6, 7, 8}))
    print("(POST p50: until the send request returned; answer p50: until the final message event arrived)")
    everything = [v for s in series.values() for v in s.first_token_ms]
    print()
    print("Where the time to the first token goes (ledger timestamps; p50 / p90 / p99 ms):")
    hop_rows = []
    for kind, s in series.items():
        placed = [one.hops for one in s.sent if one.hops]
        for name, _ in HOPS:
            values = [hops[name] for hops in placed]
            if values:
                hop_rows.append([kind, name, *(f"{percentile(values, q):.1f}" for q in (0.5, 0.9, 0.99))])
    print(_table(["message", "hop", "p50", "p90", "p99"], hop_rows, right={2, 3, 4}))
    for name, meaning in HOPS:
        print(f"  {name}: {meaning}")
    print(f"Answers whose message event reached the socket before their first token frame: {late}.")
    print()
    print(
        f"All {len(everything)} measured messages: first token p50 {percentile(everything, 0.5):.1f} ms, "
        f"p99 {percentile(everything, 0.99):.1f} ms. Every streamed answer equals its final message; "
        f"{replies} replies for {expected} messages. {elapsed:.1f} s in all."
    )

    report = {
        "benchmark": "bench.first_token",
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "revision": _git_revision(),
        "messages_per_kind": args.messages,
        "warmup": args.warmup,
        "per_ticket": args.per_ticket,
        "stack": "daphne + 1 Celery worker (prefork, concurrency 1), offline model, OFFLINE_MODEL_TOKEN_DELAY_MS=0",
        "postgres": {**pg, "host": server.host, "port": server.port, "database": DATABASE},
        "versions": _versions(),
        "platform": platform.platform(),
        "all": {"first_token": _summary(everything), "tokens_after_message": late},
        "kinds": [
            {
                "kind": kind,
                "body": KINDS[kind],
                "first_token": sums[kind][0],
                "answer": sums[kind][1],
                "post": sums[kind][2],
                "first_token_samples_ms": s.first_token_ms,
                "answer_samples_ms": s.answer_ms,
                "post_samples_ms": s.post_ms,
                "hops": {
                    name: _summary(values)
                    for name, _ in HOPS
                    if (values := [one.hops[name] for one in s.sent if one.hops])
                },
                # Each message's own hops, in the order sent: what a slow one spent its time on.
                "messages": [
                    {"ticket_id": one.ticket_id, "first_token_ms": one.first_token_ms, "hops_ms": one.hops}
                    for one in s.sent
                ],
            }
            for kind, s in series.items()
        ],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"Wrote {args.json}")
    return 0


def _count_replies(ticket_ids: list[int]) -> int:
    from tickets.models import AuthorKind, Message

    return Message.objects.filter(ticket_id__in=ticket_ids, author_kind=AuthorKind.AGENT, is_public=True).count()


def _clean_redis(url: str, name: str) -> None:
    """Delete what this run left in Redis: its queue, its channel groups, its streaming buffers."""
    import redis

    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(match=f"*{name}*"))
    if keys:
        client.delete(*keys)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"bench.first_token: {exc}", file=sys.stderr)
        sys.exit(1)
