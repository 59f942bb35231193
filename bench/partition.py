"""Recovery after a network partition, and first tokens over slow links, on test hosts.

    sudo .venv/bin/python -m bench.partition                  # 10 trials, 10 first tokens each way
    .venv/bin/python -m bench.partition --trials 30 --first-token 20

Builds the many-hosts stack of ``tests/hosts`` (network namespaces and veth pairs, so it needs
root and iproute2): PostgreSQL and Redis on one host, the payment sandbox, a web server, beat
and two workers each on their own, at the product's default recovery settings (lease 60 s,
sweep every 3 s, database keepalives 5 s idle / 2 s apart / 3 probes, TCP user timeout 10 s).

Recovery, per trial: a customer asks about an order over HTTP; the worker that takes the ticket
looks the order up and starts streaming its answer (the offline model, 150 ms per token, so an
answer takes about three seconds); the moment the first token is in the stream buffer, that
worker's host is cut off (every packet to and from it dropped, no reset). Measured on this
machine's clock: cut -> the other worker has taken the lease over (its ``agent_run_recovered``
event), and cut -> the answer stored. The cut-off worker is restarted before the next trial.

First token: one ticket at a time, POST /tickets/new/ -> the answer's first token in the
ticket's stream buffer in Redis (polled every 5 ms; the chat's WebSocket is sent the same token
at the same moment; the offline model at 30 ms per token) and -> the answer stored, over
normal links and then with every packet between the workers and PostgreSQL held 100 ms each
way (a round trip 200 ms longer) and 1 in 100 dropped each way.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STREAM_TOKENS_MS = "150"
# As under `make run`: an answer streams for about half a second, long enough to see its first token.
FIRST_TOKEN_TOKENS_MS = "30"


def summary(values: list[float]) -> str:
    if not values:
        return "no samples"
    ordered = sorted(values)
    return (
        f"p50 {statistics.median(ordered):8.0f} ms   max {ordered[-1]:8.0f} ms   "
        f"min {ordered[0]:7.0f} ms   n={len(ordered)}"
    )


def _answer_stored(stack: Any, ticket_id: int) -> Any:
    rows = stack.sql(
        "SELECT created_at FROM tickets_message WHERE ticket_id = %s AND author_kind = 'agent' AND is_public",
        ticket_id,
    )
    return rows[0][0] if rows else None


def _owner_pid(stack: Any, ticket_id: int) -> int | None:
    rows = stack.sql("SELECT owner FROM agents_ticketlease WHERE ticket_id = %s", ticket_id)
    if not rows or not rows[0][0]:
        return None
    return int(rows[0][0].split(":")[1])  # agents.lease.worker_identity: host:pid:random


def recovery_trials(stack: Any, customer: Any, trials: int) -> list[dict[str, float]]:
    import redis

    from tests.hosts.stack import wait_worker_ready
    from tests.workers import wait_until

    buffers = redis.Redis.from_url(stack.redis_url, socket_timeout=5)
    workers = {
        host.name: stack.worker(host, OFFLINE_MODEL_TOKEN_DELAY_MS=STREAM_TOKENS_MS) for host in stack.worker_hosts[:2]
    }
    for proc in workers.values():
        wait_worker_ready(proc)
    samples = []
    prefix = os.environ.get("CHANNELS_PREFIX", "").strip() or "asgi"  # as the stack's processes read it (env_str)
    for n in range(trials):
        ticket_id = customer.open_ticket("Where is my order A-1001?", client_ref=f"bench-recovery-{n}-{time.time()}")
        wait_until(lambda t=ticket_id: buffers.exists(f"{prefix}:stream:{t}"), timeout=60, what="the answer to stream",
                   interval=0.005)  # fmt: skip
        pid = _owner_pid(stack, ticket_id)
        owner = next(name for name, proc in workers.items() if proc.popen.pid == pid)
        cut_host = next(h for h in stack.worker_hosts if h.name == owner)
        stack.net.cut(cut_host)
        cut_at = time.time()
        stored = wait_until(lambda t=ticket_id: _answer_stored(stack, t), timeout=120, what="the answer")
        (taken,), *_ = stack.sql(
            "SELECT created_at FROM tickets_ticketevent WHERE ticket_id = %s AND kind = 'agent_run_recovered'",
            ticket_id,
        )
        sample = {"takeover_ms": (taken.timestamp() - cut_at) * 1000, "answer_ms": (stored.timestamp() - cut_at) * 1000}
        samples.append(sample)
        print(f"  trial {n + 1:2d}: cut {owner}; taken over +{sample['takeover_ms']:.0f} ms, "
              f"answered +{sample['answer_ms']:.0f} ms", flush=True)  # fmt: skip
        stack.net.heal(cut_host)
        stack.test_procs.remove(workers[owner])
        workers[owner] = workers[owner].restart()
        stack.test_procs.append(workers[owner])
        wait_worker_ready(workers[owner])
    return samples


def first_tokens(stack: Any, customer: Any, count: int, label: str) -> dict[str, Any]:
    import redis

    from tests.workers import wait_until

    buffers = redis.Redis.from_url(stack.redis_url, socket_timeout=5)
    first, answer, missed = [], [], 0
    for n in range(count):
        started = time.time()
        ticket_id = customer.open_ticket("Where is my order A-1001?", client_ref=f"bench-ft-{label}-{n}-{started}")
        seen: list[float] = []

        def streamed_or_stored(t: int = ticket_id, seen: list[float] = seen) -> Any:
            if not seen and buffers.exists(f"asgi:stream:{t}"):
                seen.append(time.time())
            return _answer_stored(stack, t)

        stored = wait_until(streamed_or_stored, timeout=120, what="the answer", interval=0.005)
        if seen:
            first.append((seen[0] - started) * 1000)
        else:
            missed += 1  # the whole answer streamed between two polls
        answer.append((stored.timestamp() - started) * 1000)
    return {"first_token_ms": first, "answer_ms": answer, "missed": missed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.partition", description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10, help="partitions to recover from (default 10)")
    parser.add_argument("--first-token", type=int, default=10, help="tickets per link speed (0: skip)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs (printed path)")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.hosts.netns import Network, remove_leftovers, unavailable_reason
    from tests.hosts.stack import PG_PORT, Customer, Stack, wait_http

    reason = unavailable_reason()
    if reason:
        print(f"bench.partition cannot run here: {reason}", file=sys.stderr)
        return 2
    remove_leftovers()
    log_dir = Path(tempfile.mkdtemp(prefix="bench-partition-"))
    network = Network()
    stack = Stack(network, log_dir)
    try:
        started = time.monotonic()
        stack.start_servers()
        os.environ.update({"DATABASE_URL": stack.database_url, "REDIS_URL": stack.redis_url, "DEBUG": "0",
                           "SECRET_KEY": "bench-partition-only"})  # fmt: skip
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "support.settings")
        import logging

        import django

        django.setup()
        logging.getLogger("httpx").setLevel(logging.WARNING)
        web = stack.web(stack.web_hosts[0])
        wait_http(f"{stack.base_url(stack.web_hosts[0])}/healthz", timeout=60, proc=web)
        stack.beat()
        customer = Customer(stack.base_url(stack.web_hosts[0]), "alice").login()
        print(f"stack up in {time.monotonic() - started:.1f} s (logs in {log_dir})", flush=True)

        rows = []
        if args.trials:
            print(f"\nRecovery after a worker's host is cut off mid-answer ({args.trials} trials, default settings):")
            samples = recovery_trials(stack, customer, args.trials)
            stack.end_test()
            rows += [
                ("Recovery: cut -> lease taken over by the other worker", summary([s["takeover_ms"] for s in samples])),
                ("Recovery: cut -> answer stored by the other worker", summary([s["answer_ms"] for s in samples])),
            ]
        if args.first_token:
            workers = [
                stack.worker(h, OFFLINE_MODEL_TOKEN_DELAY_MS=FIRST_TOKEN_TOKENS_MS) for h in stack.worker_hosts[:2]
            ]
            for proc in workers:
                from tests.hosts.stack import wait_worker_ready

                wait_worker_ready(proc)
            print(
                f"\nFirst tokens, {args.first_token} tickets one at a time, normal links then slow links:", flush=True
            )
            normal = first_tokens(stack, customer, args.first_token, "normal")
            for host in stack.worker_hosts[:2]:
                network.slow(host, stack.db, port=PG_PORT, delay_ms=100, loss_percent=1)
            slow = first_tokens(stack, customer, args.first_token, "slow")
            missed = normal["missed"] + slow["missed"]
            if missed:
                print(f"({missed} answers streamed whole between two polls: no first-token sample for them)")
            rows += [
                ("First token, normal links: POST -> first token", summary(normal["first_token_ms"])),
                ("First token, normal links: POST -> answer stored", summary(normal["answer_ms"])),
                (
                    "First token, slow links (+200 ms RTT, 1% loss): POST -> first token",
                    summary(slow["first_token_ms"]),
                ),
                ("First token, slow links: POST -> answer stored", summary(slow["answer_ms"])),
            ]
        width = max(len(name) for name, _ in rows)
        print()
        for name, figures in rows:
            print(f"{name:<{width}}  {figures}")
        print(
            "\nSettings: AGENT_LEASE_SECONDS=60, AGENT_SWEEP_SECONDS=3, DB_KEEPALIVES_IDLE=5, "
            "DB_KEEPALIVES_INTERVAL=2, DB_KEEPALIVES_COUNT=3, DB_TCP_USER_TIMEOUT_MS=10000 (the defaults); "
            f"offline model at {STREAM_TOKENS_MS} ms per token in the recovery trials, "
            f"{FIRST_TOKEN_TOKENS_MS} ms for first tokens."
        )
        customer.close()
    finally:
        stack.close()
        network.close()
        if not args.keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
