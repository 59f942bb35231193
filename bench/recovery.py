"""Recovery time: a worker is SIGKILLed in the middle of a turn; how long until another finishes it.

Two worker processes (``--pool=solo``: the task runs in the worker's own process, so the
kill takes the whole worker down) and beat, at the product's defaults
(``AGENT_LEASE_SECONDS=60``, ``AGENT_SWEEP_SECONDS=3``). Both workers are armed with the fault
point ``after_step_stored`` (agents/faults.py) and one shared ``AGENT_FAULT_ONCE_DIR``:
the worker that takes the ticket stores the model's first step (it asks for
``lookup_order``), then kills itself with SIGKILL while it holds the ticket's lease. The
fault fires once (a marker file); the sweeper sees that the dead owner's advisory lock is
gone (PostgreSQL dropped it with the connection), rings the ticket, and the other worker
takes the lease over before it expires and finishes the turn from the stored step. After each trial
the dead worker is started again and the marker removed, which arms the next trial.

Per trial: kill = the marker file's mtime (written just before the SIGKILL; file times
have the kernel's coarse clock, a few ms); take-over = the ``agent_run_recovered`` event
the new worker writes once it holds the lease; done = the reply Message's ``created_at``.
All on this machine's clock; the database is polled only to learn that a trial is over.
What bounds it: the next sweep (every AGENT_SWEEP_SECONDS) after the kill; the lease's
expiry (AGENT_LEASE_SECONDS) only bounds it when the dead owner's session lingers.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.common import DEMO_QUESTIONS, Cluster, Context, PartResult, latency_summary, wait_until, wait_worker_ready
from bench.overhead import BenchError

FAULT_POINT = "after_step_stored"


def _open_and_ring() -> int:
    from django.conf import settings

    from agents.tasks import advance_ticket
    from tickets import services as ticket_services
    from tickets.models import Customer

    customer = Customer.objects.select_related("user").get(user__username="alice")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="", body=DEMO_QUESTIONS["alice"])
    # This process's own doorbells go nowhere (bench.suite_settings); ring the workers' queue.
    advance_ticket.apply_async(args=[ticket.pk], queue=settings.WORKER_QUEUE)
    return ticket.pk


def _lease_expiry(ticket_id: int) -> float:
    from agents.models import TicketLease

    return TicketLease.objects.get(ticket_id=ticket_id).expires_at.timestamp()


def _outcome(ticket_id: int) -> dict[str, Any] | None:
    from agents.models import AgentRun, ModelStep, RunStatus, StepStatus
    from tickets.models import AuthorKind, Message, TicketEvent

    # The reply is committed just before the run is marked completed: wait for both.
    run = AgentRun.objects.get(ticket_id=ticket_id)
    if run.status != RunStatus.COMPLETED:
        return None
    reply = Message.objects.filter(ticket_id=ticket_id, author_kind=AuthorKind.AGENT, is_public=True).first()
    if reply is None:
        raise BenchError(f"ticket {ticket_id}: the run completed without a reply")
    # The new worker's first write after taking the lease: the recovery note on the timeline.
    recovered = TicketEvent.objects.filter(ticket_id=ticket_id, kind="agent_run_recovered").order_by("seq").first()
    if recovered is None:
        raise BenchError(f"ticket {ticket_id} was answered without a recovery")
    return {
        "reply_at": reply.created_at.timestamp(),
        "run_ended_at": run.ended_at.timestamp() if run.ended_at else None,
        "taken_over_at": recovered.created_at.timestamp(),
        "run_status": run.status,
        "epochs": run.epochs,
        "recovery_notes": len(run.recovery_notes),
        "first_step_generated": ModelStep.objects.filter(ticket_id=ticket_id, index=0).count(),
        "completed": run.status == RunStatus.COMPLETED,
        "steps_completed": ModelStep.objects.filter(ticket_id=ticket_id, status=StepStatus.COMPLETED).count(),
    }


def trial(cluster: Cluster, marker: Path, timeout: float) -> dict[str, Any]:
    ticket_id = _open_and_ring()
    wait_until(marker.exists, timeout=timeout, what=f"the worker on ticket {ticket_id} to hit {FAULT_POINT}")
    killed_at = marker.stat().st_mtime
    lease_expires_at = _lease_expiry(ticket_id)  # as the dead worker left it: nobody renews it now
    dead = wait_until(
        lambda: [p for p in cluster.workers() if not p.alive()],
        timeout=10,
        what="the worker that hit the fault point to die",
    )
    seen_dead_at = time.time()
    outcome = wait_until(lambda: _outcome(ticket_id), timeout=timeout, what=f"ticket {ticket_id} to be finished")
    if not outcome["completed"] or len(outcome["epochs"]) < 2 or outcome["first_step_generated"] != 1:
        raise BenchError(f"ticket {ticket_id} was not recovered as expected: {outcome}")
    result = {
        "ticket_id": ticket_id,
        "killed_worker": dead[0].name,
        "killed_at": killed_at,
        "death_seen_by_benchmark_ms": (seen_dead_at - killed_at) * 1000,
        **outcome,
        "recovery_ms": (outcome["reply_at"] - killed_at) * 1000,
        "lease_expired_after_kill_ms": (lease_expires_at - killed_at) * 1000,
        "takeover_ms": (outcome["taken_over_at"] - killed_at) * 1000,
        "takeover_after_expiry_ms": (outcome["taken_over_at"] - lease_expires_at) * 1000,
        "resume_to_reply_ms": (outcome["reply_at"] - outcome["taken_over_at"]) * 1000,
    }
    for proc in dead:  # start it again, armed, before the next trial
        offset = len(proc.log())
        fresh = cluster.restart(proc)
        wait_worker_ready(fresh, after=offset)
    marker.unlink()
    return result


def run(ctx: Context) -> PartResult:
    from bench.common import start_stack

    args = ctx.args
    part = PartResult("recovery")
    fault_dir = ctx.log_dir / "recovery-faults"
    fault_dir.mkdir(parents=True, exist_ok=True)
    marker = fault_dir / f"{FAULT_POINT}.fired"
    marker.unlink(missing_ok=True)
    env = {
        "AGENT_LEASE_SECONDS": str(args.lease_seconds),
        "AGENT_SWEEP_SECONDS": str(args.sweep_seconds),
        "AGENT_FAULT_POINTS": FAULT_POINT,
        "AGENT_FAULT_ONCE_DIR": str(fault_dir),
    }
    cluster, _ = start_stack(ctx, "recovery", workers=2, web=False, beat=True, **env)
    trials: list[dict[str, Any]] = []
    try:
        for _ in range(args.trials):
            trials.append(trial(cluster, marker, timeout=30 + 2 * (args.lease_seconds + args.sweep_seconds)))
    finally:
        cluster.stop_all()
    total = latency_summary([t["recovery_ms"] for t in trials])
    takeover = latency_summary([t["takeover_ms"] for t in trials])
    resume = latency_summary([t["resume_to_reply_ms"] for t in trials])
    expiry = latency_summary([t["lease_expired_after_kill_ms"] for t in trials])
    after_expiry = latency_summary([t["takeover_after_expiry_ms"] for t in trials])
    before_expiry = sum(1 for t in trials if t["takeover_after_expiry_ms"] < 0)
    part.raw.update(
        {
            "how": f"fault point {FAULT_POINT} (the worker SIGKILLs itself while holding the lease), "
            "both workers armed, a marker file re-arms each trial",
            "settings": {k: v for k, v in env.items() if k != "AGENT_FAULT_ONCE_DIR"} | {"worker_pool": "solo"},
            "trials": len(trials),
            "recovery": total,
            "takeover": takeover,
            "resume_to_reply": resume,
            "lease_expired_after_kill": expiry,
            "takeover_after_lease_expiry": after_expiry,
            "taken_over_before_the_lease_expired": before_expiry,
            "samples": trials,
        }
    )
    bound = f"lease {args.lease_seconds:g} s, sweep every {args.sweep_seconds:g} s"
    part.add(
        "recovery_p50_ms",
        "Recovery: SIGKILL mid-turn -> turn finished by the other worker (p50)",
        total["p50_ms"],
        "ms",
        f"{len(trials)} trials; {bound}; p50s: taken over +{takeover['p50_ms']:.0f} ms after the kill "
        f"({before_expiry} of {len(trials)} before the lease expired), reply +{resume['p50_ms']:.0f} ms later",
        0,
    )
    part.add(
        "recovery_p99_ms",
        "Recovery: SIGKILL mid-turn -> turn finished (p99)",
        total["p99_ms"],
        "ms",
        f"max {total['max_ms']:.0f} ms; bounded by one sweep interval once the dead owner's session is gone",
        0,
    )
    return part
