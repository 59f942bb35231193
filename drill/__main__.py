"""``make drill``: a crash drill against a fresh stack, then the product's promises checked.

    python -m support.embedded -- python -m drill        # make drill: the embedded servers
    python -m drill --customers 4 --kills 2              # on DATABASE_URL / REDIS_URL

What it does, on a scratch database (``drill_run``) and a Celery queue of its own,
traffic on loopback only:

1. migrates and seeds the scratch database, adds drill customers with orders, and
   starts the payment sandbox (its own process, on that database), the web server
   (daphne), three worker processes and beat;
2. every customer signs in over HTTP and opens four tickets (a small refund, a
   refund above the approval threshold, an order question, an email asked for),
   each POST sent twice,
   then writes a follow-up on the small refund, also sent twice;
3. meanwhile: the workers are armed with the named fault points (each fires once,
   SIGKILL), random workers are SIGKILLed ``--kills`` times, the broker's queue is
   flushed once, every connection to the database is dropped once (what a restart
   of PostgreSQL does to its clients), dead workers are started again, and a staff
   member approves every request that waits, and each customer confirms the refund
   they are asked about (the button in the chat);
4. when every ticket is at rest (or ``--timeout`` passes), it checks the ledger in
   SQL and the payment provider's own records and prints one line per invariant.

Exit status 0 when every invariant holds, 1 when one is broken, 2 when the drill
itself could not run. ``--break skip_idempotency_key`` breaks the money path on
purpose (agents/faults.py), to see the drill catch it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import threading
import time
import traceback
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LOG_DIR = ROOT / "drill-results"
SCRATCH_DB = "drill_run"
RUNNING_MARK = "support-drill running"  # the application_name of a running drill's admin connection
WORKERS = 3
# Each point fires once in the whole drill (a marker file in a shared folder).
WORKER_FAULTS = [
    "after_call_started:3,after_provider_refund,after_refund_given_up",
    "after_step_stored:2,after_keyed_effect,after_provider_refund,after_refund_given_up",
    "mid_stream:4,before_lease_release:5,after_provider_refund,after_refund_given_up,after_never_effect",
]
# Every REFUSED_EVERY-th customer's small order is held by the provider for less than our ledger says:
# the provider refuses its refund, the worker gives up on it (a fault point), the customer must be told
# once and the ticket handed to a person.
REFUSED_EVERY = 4
# What recovery and tool errors tell the model (agents/conversation.py, agents/recovery.py): a customer
# reads plain sentences written for customers (DESIGN.md, invariant 13), never these.
MODEL_WORDS = ("may or may not have taken effect", "check before repeating", "RECOVERY NOTE", "idempotency")
# A person presses again on the "back in a moment" page (the web's database pool was busy).
BUSY_RETRIES = 8


class DrillError(Exception):
    """The drill itself could not run (not a broken invariant)."""


@dataclass
class Check:
    name: str
    checked: int = 0
    violations: list[str] = field(default_factory=list)


def _setup_environment(args: argparse.Namespace) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "drill.settings"
    os.environ["DRILL_DATABASE"] = SCRATCH_DB
    from bench.environment import configure_loopback_stack

    configure_loopback_stack(secret_key="drill-only-secret-key-not-for-production")


# --- the stack ------------------------------------------------------------------------------


class Stack:
    def __init__(self, args: argparse.Namespace, log_dir: Path) -> None:
        from bench.common import Cluster

        self.args = args
        self.log_dir = log_dir
        self.fault_dir = log_dir / "faults"
        self.fault_dir.mkdir(parents=True, exist_ok=True)
        self.sandbox: Any = None
        self.cluster: Cluster | None = None
        self.base_url = ""
        self.events: list[str] = []

    def child_env(self) -> dict[str, str]:
        from django.conf import settings

        env = dict(os.environ)
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": "drill.settings",
                "DRILL_DATABASE": SCRATCH_DB,
                "DATABASE_URL": settings.DATABASE_URL,
                "REDIS_URL": settings.REDIS_URL,
                "STRIPE_API_BASE": self.sandbox.base_url,
                "AGENT_MODEL": "offline",
                "OFFLINE_MODEL_TOKEN_DELAY_MS": "3",
                "REFUND_RECONCILE_SECONDS": "5",
                "REFUND_UNCERTAIN_AFTER_SECONDS": "20",
                "LOG_LEVEL": "INFO",
                "PYTHONUNBUFFERED": "1",
                "AGENT_FAULT_ONCE_DIR": str(self.fault_dir),
                # Each email the agent sends is a file here: the drill counts them.
                "EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
                "EMAIL_FILE_PATH": str(self.log_dir / "mail"),
            }
        )
        return env

    def start(self) -> None:
        from django.conf import settings

        from bench.common import Cluster, free_port, wait_http, wait_worker_ready
        from payments.sandbox_process import SandboxProcess

        self.sandbox = SandboxProcess(database_url=_libpq_url(settings), log_path=self.log_dir / "sandbox.log")
        self.sandbox.start()
        self.cluster = Cluster("drill", self.log_dir, self.child_env())
        broken = f",{self.args.break_}" if self.args.break_ else ""
        started = [self.cluster.worker(AGENT_FAULT_POINTS=faults + broken) for faults in WORKER_FAULTS[:WORKERS]]
        self.cluster.beat()
        port = free_port()
        self.base_url = f"http://127.0.0.1:{port}"
        wait_http(f"{self.base_url}/accounts/login/", timeout=60, proc=self.cluster.web(port))
        for proc in started:
            wait_worker_ready(proc)

    def revive_dead_workers(self) -> None:
        from bench.common import wait_worker_ready

        assert self.cluster is not None
        for proc in self.cluster.workers():
            if not proc.alive():
                self.events.append(f"{proc.name} died (exit {proc.popen.returncode}); started again")
                offset = len(proc.log())
                wait_worker_ready(self.cluster.restart(proc), after=offset)

    def kill_random_worker(self) -> None:
        import signal

        assert self.cluster is not None
        alive = [p for p in self.cluster.workers() if p.alive()]
        if alive:
            victim = random.choice(alive)
            victim._signal(signal.SIGKILL)
            self.events.append(f"SIGKILLed {victim.name}")

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop_all()
        if self.sandbox is not None:
            self.sandbox.stop()


def _libpq_url(settings: Any) -> str:
    from psycopg.conninfo import make_conninfo

    db = settings.DATABASES["default"]
    parts = {"host": db.get("HOST"), "port": db.get("PORT"), "user": db.get("USER"), "password": db.get("PASSWORD")}
    return make_conninfo("", dbname=db["NAME"], **{k: str(v) for k, v in parts.items() if v})


def _drop_database_connections() -> int:
    """Terminate every other session on the scratch database, as a PostgreSQL restart would."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


def _flush_broker() -> int:
    """Drop every doorbell of the drill's queue: those waiting and those a worker took and has not
    acknowledged (kombu's ``unacked``), as a broker that lost its data would."""
    import json

    from bench.common import _redis, redis_purge_queue
    from drill.settings import DRILL_NAME

    dropped = redis_purge_queue(DRILL_NAME)
    client = _redis()
    for key, value in client.hscan_iter("unacked"):
        try:
            routing_key = json.loads(value)[2]
        except (ValueError, IndexError, TypeError):
            continue
        if routing_key == DRILL_NAME:
            client.hdel("unacked", key)
            client.zrem("unacked_index", key)
            dropped += 1
    return dropped


# --- the customers --------------------------------------------------------------------------


def _make_customers(count: int, sandbox: Any) -> list[dict[str, Any]]:
    """Drill customers, each with a small order, a large one (above the approval threshold) and one to ask about."""
    from django.contrib.auth import get_user_model

    from tickets.demo import DEMO_PASSWORD
    from tickets.models import Customer, Order, OrderLine, OrderStatus

    people = []
    for n in range(count):
        username = f"drill{n}"
        user = get_user_model().objects.create_user(username=username, password=DEMO_PASSWORD)
        customer = Customer.objects.create(user=user, name=f"Drill Customer {n}", email=f"{username}@example.test")
        orders = {}
        for kind, cents in (("S", 3000), ("L", 45000), ("Q", 1500)):
            number = f"{kind}-{n:02d}{random.randint(100, 999)}"
            order = Order.objects.create(
                customer=customer,
                number=number,
                status=OrderStatus.DELIVERED,
                total_cents=cents,
                currency="usd",
                payment_reference=f"pi_drill_{number}",
            )
            OrderLine.objects.create(
                order=order, sku=kind, description="Drill item", quantity=1, unit_price_cents=cents
            )
            refused = kind == "S" and n % REFUSED_EVERY == 1
            sandbox.seed_payment(order.payment_reference, cents // 3 if refused else cents, "usd")
            orders[kind] = number
        people.append({"username": username, "orders": orders})
    return people


async def _patiently(attempt: Any) -> Any:
    """``attempt()`` again while the web answers 503 ("back in a moment"), as a person would; a POST
    sent again carries the same client id, so it is not taken twice."""
    from bench.common import BenchError

    for n in range(BUSY_RETRIES):
        try:
            return await attempt()
        except BenchError as exc:
            if "HTTP 503" not in str(exc) or n == BUSY_RETRIES - 1:
                raise
        await asyncio.sleep(0.5 * (n + 1))
    return None


async def _customer_traffic(base_url: str, person: dict[str, Any]) -> list[int]:
    from bench.common import BenchError, Customer

    customer = Customer(base_url, person["username"])
    tickets = []
    try:
        await _patiently(customer.login)
        asks = [
            f"Please refund order {person['orders']['S']}",
            f"Please refund order {person['orders']['L']}",
            f"Where is my order {person['orders']['Q']}?",
            "Please email me a copy of this conversation.",
        ]
        for body in asks:
            ref = uuid.uuid4().hex
            ticket_id, _ = await _patiently(lambda b=body, r=ref: customer.open_ticket(b, client_ref=r))
            # the same POST, sent twice
            again, _ = await _patiently(lambda b=body, r=ref: customer.open_ticket(b, client_ref=r))
            if again != ticket_id:
                raise DrillError(f"a retried ticket POST opened ticket {again} beside {ticket_id}")
            tickets.append(ticket_id)
            person.setdefault("sent", []).append((ticket_id, f"open:{ref}"))
        await asyncio.sleep(random.uniform(0.1, 0.6))
        token = customer.client.cookies["csrftoken"]
        follow_up = {"client_msg_id": uuid.uuid4().hex, "body": "Thank you!"}

        async def post_follow_up() -> None:
            answer = await customer.client.post(
                f"/tickets/{tickets[0]}/messages",
                json=follow_up,
                headers={"X-CSRFToken": token, "Referer": f"{base_url}/tickets/{tickets[0]}/"},
            )
            if answer.status_code not in (200, 201):
                raise BenchError(f"posting a message: HTTP {answer.status_code} {answer.text[:200]}")

        for _ in range(2):  # the same message, sent twice
            await _patiently(post_follow_up)
        person.setdefault("sent", []).append((tickets[0], follow_up["client_msg_id"]))
    finally:
        await customer.close()
    return tickets


async def _all_traffic(base_url: str, people: list[dict[str, Any]]) -> list[int]:
    results = await asyncio.gather(*(_customer_traffic(base_url, p) for p in people))
    return [ticket for tickets in results for ticket in tickets]


# --- chaos and staff, while the drill runs -------------------------------------------------------


def _approve_waiting(staff: Any) -> int:
    from approvals import services as approval_services
    from approvals.models import ApprovalRequest, ApprovalStatus

    approved = 0
    for approval_id in ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING).values_list("pk", flat=True):
        try:
            approval_services.approval_decide(approval_id=approval_id, user=staff, approve=True, note="drill")
            approved += 1
        except Exception:  # noqa: BLE001 - decided meanwhile, or expired: the checks will tell
            pass
    return approved


def _confirm_waiting() -> int:
    """Every customer confirms the refund they are asked about (the button in the chat)."""
    from agents.confirmation import confirmation_decide
    from agents.models import CallStatus, ToolCall

    confirmed = 0
    waiting = ToolCall.objects.filter(
        status=CallStatus.AWAITING_CONFIRMATION, confirmation_decision__isnull=True
    ).exclude(confirmation_expires_at=None)
    for call in waiting.select_related("ticket__customer__user"):
        try:
            confirmation_decide(
                ticket_id=call.ticket_id, call_id=call.pk, user=call.ticket.customer.user, confirm=True,
                digest=call.confirmation_digest,
            )  # fmt: skip
            confirmed += 1
        except Exception:  # noqa: BLE001 - answered meanwhile, or expired: the checks will tell
            pass
    return confirmed


def _live_leases(ticket_ids: list[int]) -> list[int]:
    """Tickets whose lease a live worker holds right now (its advisory lock is there)."""
    from django.db import connection

    from agents.lease import LOCK_NAMESPACE

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT l.objid::bigint FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted "
            "AND l.objsubid = 1 AND l.classid = %s AND l.database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database()) AND l.objid::bigint = ANY(%s)",
            [LOCK_NAMESPACE, ticket_ids],
        )
        return [int(row[0]) for row in cursor.fetchall()]


def _decided_not_applied(ticket_ids: list[int]) -> Any:
    """Calls staff decided on that wait, with their paused run, for a pass to apply the decision."""
    from agents.models import ACTIVE_RUN_STATUSES, CallStatus, ToolCall

    return ToolCall.objects.filter(
        ticket_id__in=ticket_ids, status=CallStatus.AWAITING_APPROVAL, approval_decision__isnull=False,
        run__status__in=ACTIVE_RUN_STATUSES,
    )  # fmt: skip


def _leases_held_throughout(ticket_ids: list[int], seconds: float = 5.0, every: float = 0.25) -> set[int]:
    """Tickets whose lease a live worker holds now and at every look for ``seconds``: a doorbell's
    pass that finds nothing to do holds it for some milliseconds (a sweep rings the tickets, a
    flushed broker's doorbells come again), which is no stuck ticket; a stuck lease stays held."""
    held = set(_live_leases(ticket_ids))
    deadline = time.monotonic() + seconds
    while held and time.monotonic() < deadline:
        _pause(every)
        held &= set(_live_leases(ticket_ids))
    return held


def _pause(seconds: float) -> None:
    time.sleep(seconds)


def _at_rest(ticket_ids: list[int]) -> bool:
    """Nothing left to do and nobody doing it. Read in an order in which work cannot slip between the
    reads: a run starts only from a message not yet taken in, so messages are read before runs."""
    from agents.models import OPEN_REFUND_STATUSES, AgentRun, CallStatus, Refund, RunStatus, ToolCall
    from approvals.models import ApprovalRequest, ApprovalStatus
    from tickets.models import AuthorKind, Message, TicketStatus

    waiting = Message.objects.filter(
        ticket_id__in=ticket_ids, author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True
    ).exclude(ticket__status__in=[TicketStatus.WITH_HUMAN, TicketStatus.CLOSED])
    if waiting.exists():
        return False
    if ApprovalRequest.objects.filter(ticket_id__in=ticket_ids, status=ApprovalStatus.PENDING).exists():
        return False
    if ToolCall.objects.filter(ticket_id__in=ticket_ids, status=CallStatus.AWAITING_CONFIRMATION).exists():
        return False
    if _decided_not_applied(ticket_ids).exists():
        return False  # approved (or rejected): the pass that carries the run on has not run yet
    if AgentRun.objects.filter(ticket_id__in=ticket_ids, status__in=[RunStatus.RUNNING]).exists():
        return False
    if Refund.objects.filter(ticket_id__in=ticket_ids, status__in=OPEN_REFUND_STATUSES).exists():
        return False
    return not _live_leases(ticket_ids)


def _chaos(
    stack: Stack,
    args: argparse.Namespace,
    stop: threading.Event,
    traffic_done: threading.Event,
    chaos_done: threading.Event,
    staff: Any,
) -> None:
    from django.db import close_old_connections

    kills_left = args.kills
    flushes_left = args.flushes
    dropped = False
    provider_faults = args.provider_faults
    started = time.monotonic()
    next_kill = started + random.uniform(0.5, 2)
    while not stop.wait(0.3):
        try:
            close_old_connections()
            stack.revive_dead_workers()
            now = time.monotonic()
            if kills_left and now >= next_kill:
                stack.kill_random_worker()
                kills_left -= 1
                next_kill = now + random.uniform(1, 3)
            if provider_faults and now - started > 1:
                # The provider fails now and then: before it stores a refund, after (the answer lost),
                # or it drops the connection after storing it. Each takes the next refund request.
                mode = random.choice(["error_before_commit", "error_after_commit", "drop_after_commit"])
                stack.sandbox.fault(mode)
                stack.events.append(f"the provider will fail the next refund request: {mode}")
                provider_faults -= 1
            if flushes_left and now - started > 2 and random.random() < 0.2:
                stack.events.append(f"flushed the broker ({_flush_broker()} doorbells dropped)")
                flushes_left -= 1
            if not dropped and traffic_done.is_set() and now - started > 3:
                stack.events.append(f"dropped every database connection ({_drop_database_connections()} sessions)")
                dropped = True
            approved = _approve_waiting(staff)
            if approved:
                stack.events.append(f"staff approved {approved} request(s)")
            confirmed = _confirm_waiting()
            if confirmed:
                stack.events.append(f"customers confirmed {confirmed} refund(s)")
            if not kills_left and not flushes_left and dropped:
                chaos_done.set()
        except Exception as exc:  # noqa: BLE001 - the chaos goes on; a dropped connection hits us too
            stack.events.append(f"chaos step failed: {type(exc).__name__}: {str(exc)[:120]}")
            from django.db import connection

            connection.close()


# --- the checks -----------------------------------------------------------------------------------


def check_invariants(
    ticket_ids: list[int],
    provider_refunds: list[dict[str, Any]],
    mail_dir: Path | None = None,
    sent: list[tuple[int, str]] | None = None,
) -> list[Check]:
    from agents.approval import arguments_digest
    from agents.models import AgentRun, ApprovalPolicy, Refund, RunStatus, TicketLease
    from approvals.models import ApprovalRequest, ApprovalStatus
    from tickets.models import AuthorKind, Message, Ticket, TicketEvent, TicketStatus

    drill_refunds = [r for r in provider_refunds if r["payment_intent"].startswith("pi_drill_")]
    checks: list[Check] = []

    keys = Check("one refund per idempotency key at the provider", checked=len(drill_refunds))
    for key, count in Counter(r["metadata"].get("idempotency_key", "") for r in drill_refunds).items():
        if count > 1:
            keys.violations.append(f"{count} refunds under key {key}")
    checks.append(keys)

    ledger = {r.provider_refund_id: r for r in Refund.objects.exclude(provider_refund_id=None).select_related("order")}
    match = Check("the provider's refunds are the ledger's", checked=len(drill_refunds))
    for refund in drill_refunds:
        ours = ledger.get(refund["id"])
        if ours is None:
            match.violations.append(f"{refund['id']} ({refund['amount']} cents) is not in the ledger")
        elif ours.amount_cents != refund["amount"]:
            match.violations.append(f"{refund['id']}: {refund['amount']} at the provider, {ours.amount_cents} ours")
    at_provider = {r["id"] for r in drill_refunds}
    for refund_id in ledger:
        if refund_id not in at_provider:
            match.violations.append(f"ledger refund {refund_id} is not at the provider")
    checks.append(match)

    policy = ApprovalPolicy.current()
    approval = Check("no refund without its approval", checked=len(drill_refunds))
    for refund in drill_refunds:
        ours = ledger.get(refund["id"])
        call = ours.tool_call if ours else None
        needed = refund["amount"] > policy.refund_threshold_cents or (call is not None and call.approval_required)
        if not needed:
            continue
        approved = (
            call is not None
            and ApprovalRequest.objects.filter(
                tool_call=call, status=ApprovalStatus.APPROVED, arguments_digest=arguments_digest(call.arguments)
            ).exists()
        )
        if not approved:
            approval.violations.append(f"{refund['id']} ({refund['amount']} cents) has no approval for its arguments")
    checks.append(approval)

    twice = Check("no request refunded twice", checked=len(ticket_ids))
    per_ticket_order: dict[tuple[str, str], int] = defaultdict(int)
    for refund in drill_refunds:
        ticket = refund["metadata"].get("ticket_id", "?")
        per_ticket_order[(ticket, refund["metadata"].get("order_number", "?"))] += 1
    for (ticket, order), count in per_ticket_order.items():
        if count > 1:
            twice.violations.append(f"ticket {ticket}: order {order} refunded {count} times")
    checks.append(twice)

    answered = Check("every customer message answered or handed to a person", checked=0)
    stuck = Check("no ticket stuck", checked=len(ticket_ids))
    gapless = Check("gapless timeline on every ticket", checked=len(ticket_ids))
    live = _leases_held_throughout(ticket_ids)
    for ticket in Ticket.objects.filter(pk__in=ticket_ids):
        messages = list(Message.objects.filter(ticket=ticket).order_by("created_at", "id"))
        for n, message in enumerate(messages):
            if message.author_kind != AuthorKind.CUSTOMER:
                continue
            answered.checked += 1
            # "We got your message, it waits for the decision" is not an answer to it.
            later = [
                m
                for m in messages[n + 1 :]
                if m.is_public
                and m.author_kind != AuthorKind.CUSTOMER
                and not (m.client_msg_id or "").startswith("waiting:")
            ]
            if not later and ticket.status not in {TicketStatus.WITH_HUMAN, TicketStatus.CLOSED}:
                answered.violations.append(f"ticket {ticket.pk}: message {message.pk} has no answer")
        if AgentRun.objects.filter(ticket=ticket, status=RunStatus.RUNNING).exists():
            stuck.violations.append(f"ticket {ticket.pk}: a run is still running")
        for call_id in _decided_not_applied([ticket.pk]).values_list("pk", flat=True):
            stuck.violations.append(f"ticket {ticket.pk}: the decision on call {call_id} was never applied")
        if ticket.pk in live:
            lease = TicketLease.objects.get(ticket=ticket)
            stuck.violations.append(f"ticket {ticket.pk}: its lease is still held by {lease.owner}, alive")
        unhandled = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, agent_handled_at=None)
        if unhandled.exists() and ticket.status not in {TicketStatus.WITH_HUMAN, TicketStatus.CLOSED}:
            stuck.violations.append(f"ticket {ticket.pk}: {unhandled.count()} message(s) never taken in")
        seqs = list(TicketEvent.objects.filter(ticket=ticket).order_by("seq").values_list("seq", flat=True))
        if seqs != list(range(1, len(seqs) + 1)) or (seqs and seqs[-1] != ticket.last_event_seq):
            gapless.violations.append(f"ticket {ticket.pk}: sequence {seqs[:5]}... last {ticket.last_event_seq}")
        customer_bodies = Counter(m.body for m in messages if m.author_kind == AuthorKind.CUSTOMER)
        for body, count in customer_bodies.items():
            if count > 1:
                answered.violations.append(f"ticket {ticket.pk}: the message {body!r} was stored {count} times")
    checks += [answered, stuck, gapless]
    checks.append(_check_refunds_given_up(ticket_ids))
    checks += _check_money_and_words(ticket_ids, drill_refunds, ledger)
    if sent is not None:
        checks.append(_check_nothing_lost(sent))
    if mail_dir is not None:
        checks.append(_check_emails(ticket_ids, mail_dir))
    return checks


def _check_nothing_lost(sent: list[tuple[int, str]]) -> Check:
    """Every message a customer's browser was answered for (the ticket opened with it, the follow-up)
    is in the ledger, on its ticket. (A scratch database dropped or taken over under the drill shows
    here too, instead of checks that pass on too few rows.)"""
    from tickets.models import AuthorKind, Message

    check = Check("no customer message lost", checked=len(sent))
    stored = set(
        Message.objects.filter(author_kind=AuthorKind.CUSTOMER, client_msg_id__in=[key for _, key in sent]).values_list(
            "ticket_id", "client_msg_id"
        )
    )
    for ticket_id, key in sent:
        if (ticket_id, key) not in stored:
            check.violations.append(f"ticket {ticket_id}: the message {key} is not in the ledger")
    return check


def _check_emails(ticket_ids: list[int], mail_dir: Path) -> Check:
    """An email cannot be deduplicated (its tool's replay policy is ``never``): each customer asked for
    one, and none is sent twice, whatever worker died after sending it."""
    from tickets.models import Ticket

    sent: Counter[str] = Counter()
    for path in mail_dir.glob("*.log") if mail_dir.is_dir() else []:
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("To: "):
                sent[line[4:].strip().lower()] += 1
    asked = Ticket.objects.filter(pk__in=ticket_ids, subject__icontains="email me").select_related("customer")
    check = Check("no email sent twice", checked=sum(sent.values()))
    for ticket in asked:
        count = sent.get(ticket.customer.email.lower(), 0)
        if count > 1:
            check.violations.append(f"ticket {ticket.pk}: {count} emails to {ticket.customer.email}")
    return check


def _check_money_and_words(
    ticket_ids: list[int], drill_refunds: list[dict[str, Any]], ledger: dict[str, Any]
) -> list[Check]:
    """What the checks above leave open: no order refunded beyond its amount, an approval decided by a
    member of staff before the money moved, the customer's Confirm on the exact arguments, one reply per
    turn, and no customer told a refund was made that was not."""
    import re

    from agents.calls import arguments_digest
    from agents.models import RefundStatus
    from approvals.models import ApprovalRequest, ApprovalStatus
    from tickets.models import AuthorKind, Message, Order
    from tickets.money import format_money

    moved = [r for r in drill_refunds if r["status"] in {"succeeded", "pending", "requires_action"}]
    beyond = Check("no order refunded beyond its amount", checked=len(moved))
    per_payment: dict[str, int] = defaultdict(int)
    for refund in moved:
        per_payment[refund["payment_intent"]] += refund["amount"]
    totals = dict(
        Order.objects.filter(payment_reference__in=list(per_payment)).values_list("payment_reference", "total_cents")
    )
    for payment, cents in per_payment.items():
        if cents > totals.get(payment, 0):
            beyond.violations.append(f"{payment}: {cents} cents refunded, the order is {totals.get(payment)}")

    staff = Check("every approved refund approved by staff before it was paid", checked=0)
    confirmed = Check("every confirmed refund confirmed on its arguments", checked=0)
    for refund in drill_refunds:
        ours = ledger.get(refund["id"])
        call = ours.tool_call if ours else None
        if call is None:
            continue
        if call.approval_required:
            staff.checked += 1
            approvals = ApprovalRequest.objects.filter(
                tool_call=call, status=ApprovalStatus.APPROVED, arguments_digest=arguments_digest(call.arguments)
            ).select_related("decided_by")
            good = [
                a for a in approvals
                if a.decided_by is not None and a.decided_by.is_staff and a.decided_by.is_active
                and a.decided_at is not None and a.decided_at.timestamp() <= refund["created"] + 1
            ]  # fmt: skip
            if not good:
                staff.violations.append(f"{refund['id']} (call {call.pk}): no staff approval before the payment")
        if call.confirmation_required:
            confirmed.checked += 1
            if call.confirmation_decision != "confirmed" or call.confirmation_digest != arguments_digest(
                call.arguments
            ):
                confirmed.violations.append(
                    f"{refund['id']} (call {call.pk}): confirmation {call.confirmation_decision!r} on other arguments"
                    if call.confirmation_decision == "confirmed"
                    else f"{refund['id']} (call {call.pk}): paid with confirmation {call.confirmation_decision!r}"
                )

    words = Check("no customer reads words meant for the model", checked=0)
    for message in Message.objects.filter(ticket_id__in=ticket_ids, is_public=True).exclude(
        author_kind=AuthorKind.CUSTOMER
    ):
        words.checked += 1
        found = [w for w in MODEL_WORDS if w.lower() in message.body.lower()]
        if found:
            words.violations.append(f"ticket {message.ticket_id}: message {message.pk} says {found[0]!r}")

    replies = Check("one reply per agent turn, none repeated", checked=0)
    truthful = Check("no customer told of a refund that was not made", checked=0)
    made = {
        (r.ticket_id, r.order.number, format_money(r.amount_cents, r.currency))
        for r in ledger.values()
        if r.status in {RefundStatus.SUCCEEDED, RefundStatus.PENDING}
    }
    said = re.compile(r"I've refunded (\S+) on order (\S+?)\. ")
    steps_per_run: dict[str, set[str]] = defaultdict(set)
    previous: dict[int, str] = {}
    for message in Message.objects.filter(ticket_id__in=ticket_ids, is_public=True).order_by(
        "ticket", "created_at", "id"
    ):
        if message.author_kind != AuthorKind.AGENT:
            if message.author_kind == AuthorKind.CUSTOMER:
                previous.pop(message.ticket_id, None)
            continue
        replies.checked += 1
        parts = (message.client_msg_id or "").split(":")
        if parts[0] == "reply" and len(parts) == 3:
            steps_per_run[parts[1]].add(parts[2])
        if previous.get(message.ticket_id) == message.body:
            replies.violations.append(f"ticket {message.ticket_id}: message {message.pk} repeats the reply before it")
        previous[message.ticket_id] = message.body
        for amount, number in said.findall(message.body + " "):
            truthful.checked += 1
            if (message.ticket_id, number, amount) not in made:
                truthful.violations.append(f"ticket {message.ticket_id}: told {amount} refunded on {number}, not so")
    for run, steps in steps_per_run.items():
        if len(steps) > 1:
            replies.violations.append(f"run {run} replied at {len(steps)} steps ({', '.join(sorted(steps))})")
    return [beyond, staff, confirmed, words, replies, truthful]


def _check_refunds_given_up(ticket_ids: list[int]) -> Check:
    """A refund that failed or stays unconfirmed: the customer is told once, in the words written for
    customers, and a person has the ticket (no one else will check it with the provider)."""
    from agents.models import Refund, RefundStatus
    from tickets.models import AuthorKind, Message, Ticket, TicketStatus
    from tickets.money import format_money

    given_up = Refund.objects.filter(
        ticket_id__in=ticket_ids, status__in=[RefundStatus.FAILED, RefundStatus.UNCERTAIN]
    ).select_related("order")
    check = Check("every refund given up told once, a person has it", checked=len(given_up))
    for refund in given_up:
        about = f"refund of {format_money(refund.amount_cents, refund.currency)} for order {refund.order.number}"
        told = Message.objects.filter(
            ticket_id=refund.ticket_id, is_public=True, author_kind=AuthorKind.SYSTEM, body__contains=about
        ).values_list("body", flat=True)
        words = [body for body in told if "could not be completed" in body or "couldn't confirm" in body]
        status = Ticket.objects.values_list("status", flat=True).get(pk=refund.ticket_id)
        if len(words) != 1:
            check.violations.append(
                f"ticket {refund.ticket_id}: refund {refund.pk} ({refund.status}) told {len(words)} time(s)"
            )
        if status not in {TicketStatus.WITH_HUMAN, TicketStatus.CLOSED}:
            check.violations.append(f"ticket {refund.ticket_id}: refund {refund.pk} ({refund.status}), ticket {status}")
    return check


def _table(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = [f"{'invariant'.ljust(width)}  checked  violations", f"{'-' * width}  -------  ----------"]
    for check in checks:
        lines.append(f"{check.name.ljust(width)}  {check.checked:7d}  {len(check.violations):10d}")
        lines += [f"    ! {violation}" for violation in check.violations[:10]]
    return "\n".join(lines)


# --- the run ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m drill", description=__doc__.split("\n\n")[0])
    parser.add_argument("--customers", type=int, default=6, help="drill customers, 4 tickets each (default 6)")
    parser.add_argument("--kills", type=int, default=3, help="random worker SIGKILLs (default 3)")
    parser.add_argument("--timeout", type=float, default=200, help="seconds to wait for rest (default 200)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: a new one, printed)")
    parser.add_argument(
        "--break", dest="break_", default="", choices=["", "skip_idempotency_key"], help="break the product on purpose"
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch database afterwards")
    parser.add_argument(
        "--provider-faults", type=int, default=0, help="refund requests the payment provider fails (default 0)"
    )
    parser.add_argument(
        "--flushes", type=int, default=1, help="times the broker loses every doorbell, taken or not (default 1)"
    )
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    random.seed(seed)
    _setup_environment(args)

    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from bench.common import redis_cleanup
    from bench.overhead import Server, close_connections
    from drill.settings import DRILL_ADMIN_DATABASE, DRILL_NAME

    if DRILL_ADMIN_DATABASE == SCRATCH_DB:
        raise SystemExit(f"DATABASE_URL names {SCRATCH_DB!r}, the database the drill drops; use another")
    server = Server.from_django({**settings.DATABASES["default"], "NAME": DRILL_ADMIN_DATABASE})
    log_dir = LOG_DIR / time.strftime("%Y%m%d-%H%M%S")
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"Drill (seed {seed}) on {server.host or 'a socket'}:{server.port or 5432}, logs in {log_dir}", flush=True)
    began = time.monotonic()
    # One drill per server at a time: a second one would drop and make again the scratch database
    # under the first (whose checks would then read the second's tickets) and purge its queue. The
    # admin connection carries the mark while the drill lives (advisory locks are per database).
    server.scalar("SELECT set_config('application_name', %s, false)", (RUNNING_MARK,))
    others = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()"
    if server.scalar(others, (RUNNING_MARK,)):
        print(f"The drill could not run: another drill is running on this server (its database {SCRATCH_DB!r})",
              file=sys.stderr)  # fmt: skip
        return 2
    server.recreate(SCRATCH_DB)
    stack = Stack(args, log_dir)
    stop = threading.Event()
    traffic_done = threading.Event()
    chaos_done = threading.Event()
    chaos: threading.Thread | None = None
    try:
        call_command("migrate", verbosity=0, interactive=False)
        call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
        stack.start()
        people = _make_customers(args.customers, stack.sandbox)
        staff = get_user_model().objects.filter(is_superuser=True).first() or get_user_model().objects.create_superuser(
            "drill-staff", "drill-staff@example.test", uuid.uuid4().hex
        )
        chaos = threading.Thread(
            target=_chaos,
            args=(stack, args, stop, traffic_done, chaos_done, staff),
            name="drill-chaos",
            daemon=True,
        )
        chaos.start()
        ticket_ids = asyncio.run(_all_traffic(stack.base_url, people))
        traffic_done.set()
        print(f"{len(ticket_ids)} tickets opened by {len(people)} customers over HTTP; waiting for rest", flush=True)
        deadline = time.monotonic() + args.timeout
        rested = False
        while time.monotonic() < deadline:
            time.sleep(1)
            from django.db import close_old_connections

            close_old_connections()
            try:
                # At rest twice, a second apart: a decision or a retry may still ring a ticket.
                if chaos_done.is_set() and _at_rest(ticket_ids):
                    time.sleep(1)
                    if _at_rest(ticket_ids):
                        rested = True
                        break
            except Exception:  # noqa: BLE001 - our own connection may have been dropped by the drill
                from django.db import connection

                connection.close()
        stop.set()
        chaos.join(timeout=10)
        from django.db import connection

        connection.close()
        sent = [message for person in people for message in person.get("sent", [])]
        checks = check_invariants(ticket_ids, stack.sandbox.refunds(), log_dir / "mail", sent)
        if not rested:
            stuck = next(c for c in checks if c.name == "no ticket stuck")
            stuck.violations.append(f"the tickets did not come to rest within {args.timeout:g} s")
    except DrillError as exc:
        print(f"The drill could not run: {exc}", file=sys.stderr)
        return 2
    except Exception:  # noqa: BLE001 - report, clean up, exit 2
        traceback.print_exc()
        return 2
    finally:
        stop.set()
        stack.stop()
        redis_cleanup([DRILL_NAME], DRILL_NAME)
        if not args.keep:
            close_connections()
            try:
                server.drop(SCRATCH_DB)
            except Exception as exc:  # noqa: BLE001
                print(f"could not drop {SCRATCH_DB}: {exc}", file=sys.stderr)
    print("\nWhat happened:")
    for event in stack.events:
        print(f"  - {event}")
    fired = sorted(p.stem.removesuffix(".fired") for p in stack.fault_dir.glob("*.fired"))
    print(f"  - fault points fired: {', '.join(fired) or 'none'}")
    print(f"\n{_table(checks)}\n")
    broken = sum(len(c.violations) for c in checks)
    took = time.monotonic() - began
    verdict = "every invariant holds" if not broken else f"{broken} violation(s)"
    print(f"Drill finished in {took:.0f} s: {verdict}.")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
