"""The money path: no refund that needs an approval is paid without it, and no customer request is paid twice.

One test per way through that outside checks found (issue "Money path"), each
named after what it protects. Every test compares the payment sandbox's own
records (a separate process, reached over HTTP by the stripe SDK) with our
ledger, and checks that every refund the provider paid that needed an approval
has an approved request bound to its exact arguments. Crashes and races use
real Celery worker processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import call_command

from agents import refunds as refund_module
from agents.approval import arguments_digest
from agents.models import (
    AgentRun,
    CallStatus,
    ModelStep,
    Refund,
    RefundStatus,
    RunStatus,
    StepStatus,
    ToolCall,
)
from agents.offline_model import OfflineDeterministicModel
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalPolicy, ApprovalRequest, ApprovalStatus
from tests.agents.conftest import retry_time_comes
from tests.agents.test_refunds import ScriptedRefund
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer, make_order
from tests.workers import purge_broker, wait_until
from tests.workers import test_database_url as database_url
from tickets import realtime
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, Ticket, TicketEvent, TicketStatus

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(240),
    pytest.mark.usefixtures("quick_provider_retries"),
]

ROOT = Path(__file__).resolve().parents[2]
INTERNAL_WORDING = ("may or may not", "check before repeating", "RECOVERY NOTE", "idempotency", "reconcil")


@pytest.fixture
def approver(db):  # noqa: ANN001
    return make_staff("money-approver", can_decide=True)


# --- what every money test checks ---------------------------------------------------------


def assert_money_invariants(sandbox, *, needed_approval: set[str] = frozenset()) -> None:  # noqa: ANN001
    """The provider's refunds are the ledger's; a refund that needed an approval has one for its exact arguments.

    ``needed_approval``: order numbers whose refunds the test knows needed an approval,
    judged by the test from the policy, not from the ledger's own flags.
    """
    at_provider = {r["id"]: r for r in sandbox.refunds()}
    ours = {r.provider_refund_id: r for r in Refund.objects.exclude(provider_refund_id=None).select_related("order")}
    assert sorted(at_provider) == sorted(ours), (at_provider, ours)
    for refund_id, refund in ours.items():
        paid = at_provider[refund_id]
        assert paid["amount"] == refund.amount_cents
        assert paid["metadata"]["idempotency_key"] == refund.idempotency_key
    keys = [r["metadata"]["idempotency_key"] for r in at_provider.values()]
    assert len(keys) == len(set(keys)), "two refunds under one key"
    for refund in ours.values():
        call = refund.tool_call
        if call.approval_required or refund.order.number in needed_approval:
            asked = list(ApprovalRequest.objects.filter(tool_call=call))  # a call asked about again has several
            assert asked, f"refund {refund.idempotency_key} was paid with no approval request"
            approved = [a for a in asked if a.status == ApprovalStatus.APPROVED]
            assert approved, [a.status for a in asked]
            assert arguments_digest(call.arguments) in {a.arguments_digest for a in approved}


def order_for(customer, number: str, total_cents: int, sandbox):  # noqa: ANN001
    order = make_order(customer, number=number, total_cents=total_cents)
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    return order


def paid(sandbox, order) -> list[dict]:  # noqa: ANN001
    return [r for r in sandbox.refunds() if r["payment_intent"] == order.payment_reference]


def write(ticket: Ticket, body: str) -> Message:
    message, _ = ticket_services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body=body)
    return message


def public_words(ticket: Ticket) -> list[str]:
    return list(
        Message.objects.filter(ticket=ticket, is_public=True)
        .exclude(author_kind=AuthorKind.CUSTOMER)
        .values_list("body", flat=True)
    )


def at_rest(ticket: Ticket) -> bool:
    if Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True).exists():
        ticket.refresh_from_db()
        if ticket.status != TicketStatus.PENDING_APPROVAL:
            return False
    runs = AgentRun.objects.filter(ticket=ticket)
    return runs.exists() and not runs.filter(status=RunStatus.RUNNING).exists()


class SaysMoreMidAnswer:
    """The offline model, with the customer writing again while its first answer is being written."""

    name = "offline-with-a-customer-writing-mid-answer"

    def __init__(self, ticket: Ticket, body: str) -> None:
        self.inner = OfflineDeterministicModel()
        self.ticket, self.body = ticket, body
        self.requests: list[list[dict]] = []

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        self.requests.append(messages)
        response = self.inner.complete(messages=messages, tools=tools, on_token=on_token)
        if not response.tool_calls and self.body:
            write(self.ticket, self.body)  # arrives before the answer is stored
            self.body = ""
        return response


# --- 1. a crash between the intent and the approval check ---------------------------------


@pytest.mark.workers
def test_a_refund_that_needs_approval_is_not_paid_after_a_crash_right_after_its_intent(sandbox, cluster, approver):
    bob = make_customer("bob-crash")
    order = order_for(bob, "B-6099", 50000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=bob, subject="Refund", body="Please refund $300 on order B-6099")

    # The second call the run starts is the refund (the first is the order lookup).
    doomed = cluster.worker(faults="after_call_started:2")
    doomed.wait_dead(timeout=90)
    assert doomed.popen.returncode == -signal.SIGKILL, doomed.log()
    cluster.worker()
    cluster.beat()
    wait_until(
        lambda: ApprovalRequest.objects.filter(ticket=ticket).exists() or bool(paid(sandbox, order)),
        timeout=90,
        what="the refund to wait for its approval",
        cluster=cluster,
    )
    time.sleep(1.5)  # a sweep or two: nothing more may happen while it waits

    assert paid(sandbox, order) == []
    approval = ApprovalRequest.objects.get(ticket=ticket)
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert approval.status == ApprovalStatus.PENDING and approval.amount_cents == 30000
    assert call.status == CallStatus.AWAITING_APPROVAL and call.approval_required
    assert not any("refunded" in words for words in public_words(ticket))

    approval_services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    wait_until(lambda: bool(paid(sandbox, order)), timeout=60, what="the approved refund", cluster=cluster)
    wait_until(lambda: at_rest(ticket), timeout=60, what="the ticket to come to rest", cluster=cluster)
    assert len(paid(sandbox, order)) == 1
    assert_money_invariants(sandbox, needed_approval={"B-6099"})


def test_a_failure_while_deciding_on_approval_leaves_the_refund_unpaid(sandbox, monkeypatch):
    bob = make_customer("bob-error")
    order = order_for(bob, "B-6098", 50000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=bob, subject="Refund", body="Please refund $300 on order B-6098")
    real = refund_module.refund_commitments
    calls = {"n": 0}

    def flaky(**kwargs):  # noqa: ANN003, ANN202
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("the database went away while reading the refunds so far")
        return real(**kwargs)

    monkeypatch.setattr(refund_module, "refund_commitments", flaky)

    assert advance(ticket.pk).state == "retry"  # the failure is recorded and counted, nothing was committed
    assert not ToolCall.objects.filter(ticket=ticket, name="issue_refund").exists()
    retry_time_comes(ticket.pk)
    advance(ticket.pk)
    advance(ticket.pk)

    assert paid(sandbox, order) == []
    assert ApprovalRequest.objects.get(ticket=ticket).status == ApprovalStatus.PENDING
    assert_money_invariants(sandbox, needed_approval={"B-6098"})


# --- 2. a message that arrives mid-answer ---------------------------------------------------


@pytest.mark.parametrize(
    ("flagged", "number", "total", "ask"),
    [(False, "B-2001", 64900, "Please refund order B-2001"), (True, "C-3901", 3900, "Please refund order C-3901")],
    ids=["above-threshold", "flagged-customer"],
)
def test_a_refund_asked_while_the_agent_is_answering_still_waits_for_its_approval(sandbox, flagged, number, total, ask):
    customer = make_customer(flagged=flagged)
    order = order_for(customer, number, total, sandbox)
    make_order(customer, number=f"{number}0")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body=f"Where is my order {number}0?")
    model = SaysMoreMidAnswer(ticket, ask)

    advance(ticket.pk, model=model)
    advance(ticket.pk, model=model)

    assert paid(sandbox, order) == []
    approval = ApprovalRequest.objects.get(ticket=ticket)
    assert approval.status == ApprovalStatus.PENDING and approval.arguments["amount_cents"] == total
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.PENDING_APPROVAL
    assert AgentRun.objects.filter(ticket=ticket, status=RunStatus.WAITING_APPROVAL).count() == 1
    assert_money_invariants(sandbox, needed_approval={number})


@pytest.mark.workers
def test_a_refund_asked_mid_answer_waits_for_approval_with_a_real_worker(sandbox, cluster):
    bob = make_customer("bob-race")
    order = order_for(bob, "B-2002", 64900, sandbox)
    make_order(bob, number="B-2003")
    ticket, _ = ticket_services.ticket_open(customer=bob, subject="Order", body="Where is my order B-2003?")
    cluster.worker(OFFLINE_MODEL_TOKEN_DELAY_MS="40")
    cluster.beat()  # the sweeper re-rings a turn that failed: it must still not pay
    wait_until(
        lambda: bool(realtime.streamed_so_far(ticket.pk)[1]),
        timeout=60,
        what="the first answer to start streaming",
        cluster=cluster,
    )
    write(ticket, "Please refund order B-2002")
    wait_until(
        lambda: ApprovalRequest.objects.filter(ticket=ticket).exists() or bool(paid(sandbox, order)),
        timeout=60,
        what="the second turn to reach the refund",
        cluster=cluster,
    )
    time.sleep(1.5)

    assert paid(sandbox, order) == []
    assert ApprovalRequest.objects.get(ticket=ticket).status == ApprovalStatus.PENDING
    assert_money_invariants(sandbox, needed_approval={"B-2002"})


# --- 3. a follow-up message and the conversation in ledger order ----------------------------


def test_the_next_turn_sees_the_agents_reply_stored_after_the_customers_follow_up(sandbox):
    alice = make_customer("alice-follow")
    order = order_for(alice, "A-5099", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=alice, subject="Refund", body="Please refund $2 on order A-5099")
    model = SaysMoreMidAnswer(ticket, "Thank you")

    advance(ticket.pk, model=model)

    assert len(paid(sandbox, order)) == 1
    replies = list(
        Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).order_by("id").values_list("body", "id")
    )
    assert len(replies) == 2 and "I've refunded $2.00" in replies[0][0]
    thanks = Message.objects.get(ticket=ticket, body="Thank you")
    assert thanks.pk < replies[0][1]  # the reply was stored after the follow-up
    second_turn = model.requests[-1]
    contents = [m.get("content") for m in second_turn]
    assert replies[0][0] in contents and "Thank you" in contents
    # Read where the second turn took it in: after the reply the first turn wrote without reading it.
    assert contents.index(replies[0][0]) < contents.index("Thank you")
    assert any(m.get("tool_calls") and m["tool_calls"][0]["function"]["name"] == "issue_refund" for m in second_turn)
    # The stored request of the second turn is the same conversation, rebuilt from the ledger.
    run2 = AgentRun.objects.filter(ticket=ticket).order_by("id").last()
    last_step = ModelStep.objects.filter(run=run2, status=StepStatus.COMPLETED).order_by("index").last()
    assert last_step.request_messages == second_turn
    assert_money_invariants(sandbox)


@pytest.mark.workers
def test_a_thank_you_sent_right_after_a_refund_request_does_not_refund_twice(sandbox, cluster):
    alice = make_customer("alice-thanks")
    order = order_for(alice, "A-5098", 5000, sandbox)
    worker = cluster.worker(OFFLINE_MODEL_TOKEN_DELAY_MS="30")
    wait_until(lambda: " ready." in worker.log(), timeout=60, what="the worker to start", cluster=cluster)
    ticket, _ = ticket_services.ticket_open(customer=alice, subject="Refund", body="Please refund $2 on order A-5098")
    # Once the refund is sent, while the answer is being written: written before the refund's last check,
    # the thanks is words the agent never read, the refund is not sent on them, and the next turn pays it
    # and answers both at once (tests/agents/test_customer_wrote_while_the_refund_was_decided.py).
    wait_until(
        lambda: Refund.objects.filter(order=order).exists(), timeout=60, what="the refund to be sent", cluster=cluster
    )
    write(ticket, "Thank you")
    cluster.beat()
    wait_until(
        lambda: (
            at_rest(ticket)
            and not Message.objects.filter(
                ticket=ticket, author_kind=AuthorKind.CUSTOMER, agent_handled_at=None
            ).exists()
        ),
        timeout=90,
        what="both messages to be answered",
        cluster=cluster,
    )
    # The follow-up came while the first answer was being written: two turns, each answered once.
    assert AgentRun.objects.filter(ticket=ticket).count() == 2
    assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).count() == 2

    assert len(paid(sandbox, order)) == 1
    assert Refund.objects.filter(order=order).count() == 1
    assert_money_invariants(sandbox)


def test_a_customer_who_writes_during_an_approval_wait_is_refunded_once(sandbox, approver):
    bob = make_customer("bob-waits")
    order = order_for(bob, "B-2011", 64900, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=bob, subject="Refund", body="Please refund $300 on order B-2011")
    advance(ticket.pk)
    write(ticket, "Any news on my refund for order B-2011?")
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)

    approval_services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    for _ in range(3):
        advance(ticket.pk)

    assert len(paid(sandbox, order)) == 1
    assert ApprovalRequest.objects.filter(ticket=ticket).count() == 1
    assert not Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, agent_handled_at=None).exists()
    assert_money_invariants(sandbox, needed_approval={"B-2011"})


# --- 4. split refunds -----------------------------------------------------------------------


def test_refunds_split_into_small_requests_on_one_ticket_are_reviewed_once_they_repeat(sandbox):
    customer = make_customer()
    order = order_for(customer, "B-3490", 34900, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $87.25 on order B-3490"
    )
    advance(ticket.pk)
    for _ in range(3):
        write(ticket, "Please refund another $87.25 on order B-3490")
        advance(ticket.pk)

    refunded = sum(r["amount"] for r in paid(sandbox, order))
    assert refunded == 8725  # the first; the second waits for a person
    second = ApprovalRequest.objects.get(ticket=ticket)
    assert "second refund on order B-3490" in second.reason
    assert_money_invariants(sandbox)


def test_the_threshold_counts_what_the_order_already_had_refunded_across_tickets(sandbox):
    policy = ApprovalPolicy.current()
    policy.refund_threshold_cents = 1000
    policy.save()
    customer = make_customer()
    order = order_for(customer, "C-9500", 3000, sandbox)
    tickets = []
    for _ in range(3):
        ticket, _ = ticket_services.ticket_open(
            customer=customer, subject="Refund", body="Please refund $9.50 on order C-9500"
        )
        advance(ticket.pk)
        tickets.append(ticket)

    assert [r["amount"] for r in paid(sandbox, order)] == [950]
    reasons = list(ApprovalRequest.objects.filter(ticket__in=tickets).values_list("reason", flat=True))
    assert len(reasons) == 2 and all("a second refund on order C-9500" in r for r in reasons), reasons
    assert "order C-9500 already has $9.50 refunded or pending" in reasons[0]
    assert_money_invariants(sandbox)


def test_the_per_customer_limit_counts_refunds_on_every_order_in_the_window(sandbox):
    policy = ApprovalPolicy.current()
    policy.refund_threshold_cents = 1000
    policy.save()
    customer = make_customer()
    orders = [order_for(customer, f"C-95{n}0", 3000, sandbox) for n in range(3)]
    for order in orders:
        ticket, _ = ticket_services.ticket_open(
            customer=customer, subject="Refund", body=f"Please refund $9.50 on order {order.number}"
        )
        advance(ticket.pk)

    assert sum(len(paid(sandbox, order)) for order in orders) == 1
    assert ApprovalRequest.objects.filter(reason__contains="refunds to one customer above $10.00").count() == 2
    assert_money_invariants(sandbox)


# --- 5. impossible requests never reach staff --------------------------------------------


@pytest.mark.parametrize("amount_cents", [999_999, 2**31, 2**53 - 1], ids=["9999.99", "2^31", "2^53-1"])
def test_a_refund_beyond_what_the_order_can_refund_is_refused_before_any_approval(sandbox, amount_cents):
    customer = make_customer()
    order = order_for(customer, "D-2900", 2900, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund D-2900 please")
    model = ScriptedRefund(json.dumps({"order_number": "D-2900", "amount_cents": amount_cents}))

    advance(ticket.pk, model=model)

    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.FAILED and "$29.00 left to refund" in call.error
    assert not ApprovalRequest.objects.exists()
    assert paid(sandbox, order) == []
    assert_money_invariants(sandbox)


# --- 6. provider outage ---------------------------------------------------------------------


def test_provider_retries_back_off_with_jitter_and_ask_the_provider_before_each(sandbox, monkeypatch, settings):
    settings.REFUND_RETRY_FIRST_WAIT_MS = 200
    settings.REFUND_RETRY_MAX_WAIT_MS = 5000
    waits: list[float] = []
    monkeypatch.setattr(refund_module, "_sleep", waits.append)
    lookups: list[str] = []
    real_lookup = refund_module._lookup
    monkeypatch.setattr(
        refund_module, "_lookup", lambda key, ref, **how: lookups.append(key) or real_lookup(key, ref, **how)
    )
    customer = make_customer()
    order = order_for(customer, "E-1001", 5000, sandbox)
    sandbox.fault("error_before_commit", count=3)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund order E-1001")

    advance(ticket.pk)

    assert len(paid(sandbox, order)) == 1
    assert len(waits) == 3
    for n, wait in enumerate(waits):
        floor = 0.2 * 2**n
        assert floor <= wait <= floor + 0.2, waits  # exponential, with up to one first-wait of jitter
    assert len(set(waits)) == 3
    refund = Refund.objects.get(order=order)
    # Reconciled by key before each try, the first included (a key the provider forgot after 24 hours
    # would pay again), then before each of the 3 retries.
    assert lookups == [refund.idempotency_key] * 4
    assert_money_invariants(sandbox)


def test_an_approved_refund_during_an_outage_goes_to_a_person_and_the_customer_reads_plain_words(sandbox, approver):
    bob = make_customer("bob-outage")
    order = order_for(bob, "B-2021", 64900, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=bob, subject="Refund", body="Please refund order B-2021")
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    sandbox.fault("error_before_commit", method="*", path="/v1/*", count=100)

    advance(ticket.pk)

    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN
    refund = Refund.objects.get(order=order)
    assert refund.status == RefundStatus.UNCERTAIN and refund.attempts == 1
    words = public_words(ticket)
    assert any("couldn't confirm your refund of $649.00" in w for w in words), words
    assert not any(bad in w for w in words for bad in INTERNAL_WORDING), words
    assert Message.objects.filter(ticket=ticket, is_public=False, body__contains="needs a person").exists()
    assert ticket.events.filter(kind="tool_call_escalated").count() == 1

    # The provider comes back with no refund under the key: failed, staff told, and the customer, who read
    # that it could not be confirmed, reads once that it could not be completed (another move, told once).
    sandbox.clear_faults()
    assert refund_module.reconcile_open_refunds(older_than_seconds=0) == {RefundStatus.FAILED: 1}
    assert refund_module.reconcile_open_refunds(older_than_seconds=0) == {}
    refund.refresh_from_db()
    assert refund.status == RefundStatus.FAILED
    assert ticket.events.filter(kind="refund_escalated").count() == 1
    told = [w for w in public_words(ticket) if "refund of $649.00" in w]
    assert len(told) == 2 and "couldn't confirm" in told[0] and "could not be completed" in told[1], told
    assert paid(sandbox, order) == []
    assert_money_invariants(sandbox, needed_approval={"B-2021"})


def test_a_refund_the_provider_never_confirms_goes_to_a_person_and_the_customer_is_told_once(sandbox):
    customer = make_customer()
    order = order_for(customer, "E-1002", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund order E-1002")
    sandbox.fault("error_before_commit", method="*", path="/v1/*", count=100)
    advance(ticket.pk)
    call_command("reconcile_refunds", "--older-than", "0", stdout=open(os.devnull, "w"))  # noqa: SIM115

    refund = Refund.objects.get(order=order)
    assert refund.status == RefundStatus.UNCERTAIN  # the provider still cannot be asked
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN
    assert len([w for w in public_words(ticket) if "couldn't confirm your refund" in w]) == 1
    sandbox.clear_faults()
    assert_money_invariants(sandbox)


# --- 7. the provider's refund statuses ----------------------------------------------------


@pytest.mark.parametrize("settles_to", ["succeeded", "failed"])
def test_a_pending_refund_stays_open_until_the_reconciler_settles_it(sandbox, settles_to):
    customer = make_customer()
    order = order_for(customer, f"F-10{len(settles_to)}", 5000, sandbox)
    sandbox.fault("refund_status:pending")
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body=f"Please refund order {order.number}"
    )

    advance(ticket.pk)

    refund = Refund.objects.get(order=order)
    assert (refund.status, refund.provider_status) == (RefundStatus.PENDING, "pending")
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.SUCCEEDED and call.result["status"] == "pending"
    assert "payment provider is processing it" in public_words(ticket)[-1]
    assert refund_module.reconcile_open_refunds(older_than_seconds=3600) == {RefundStatus.PENDING: 1}

    sandbox.settle_refund(refund.provider_refund_id, settles_to)
    refund_module.reconcile_open_refunds(older_than_seconds=3600)

    refund.refresh_from_db()
    ticket.refresh_from_db()
    if settles_to == "succeeded":
        assert refund.status == RefundStatus.SUCCEEDED
        assert ticket.events.filter(kind="refund_succeeded", is_public=True).count() == 1
        assert ticket.status != TicketStatus.WITH_HUMAN
    else:
        assert refund.status == RefundStatus.FAILED
        assert ticket.status == TicketStatus.WITH_HUMAN
        assert any("could not be completed by our payment provider" in w for w in public_words(ticket))
    assert_money_invariants(sandbox)


@pytest.mark.parametrize("status", ["failed", "canceled"])
def test_a_refund_the_provider_fails_is_a_failure_that_goes_to_a_person(sandbox, status):
    customer = make_customer()
    order = order_for(customer, f"F-20{len(status)}", 5000, sandbox)
    sandbox.fault(f"refund_status:{status}")
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body=f"Please refund order {order.number}"
    )

    advance(ticket.pk)

    refund = Refund.objects.get(order=order)
    assert (refund.status, refund.provider_status) == (RefundStatus.FAILED, status)
    assert ToolCall.objects.get(ticket=ticket, name="issue_refund").status == CallStatus.FAILED
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN
    words = public_words(ticket)
    assert not any("I've refunded" in w for w in words)
    assert any("could not be completed by our payment provider" in w for w in words)
    assert not any(bad in w for w in words for bad in INTERNAL_WORDING)
    assert_money_invariants(sandbox)


# --- 8. the approval rule does not depend on the order of INSTALLED_APPS -------------------


@pytest.mark.parametrize("approvals_first", [False, True], ids=["agents-first", "approvals-first"])
def test_which_refunds_need_approval_does_not_depend_on_app_order(approvals_first):
    script = """
import django, os
from django.conf import settings
django.setup()
from agents.tools import REGISTRY
refund = REGISTRY["issue_refund"]
apps = [a for a in settings.INSTALLED_APPS if a in ("agents", "approvals")]
print(apps, refund.needs_approval is not None, getattr(refund, "precheck", None) is not None)
"""
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.agents.app_order_settings", DATABASE_URL=database_url())
    env["APPROVALS_FIRST"] = "1" if approvals_first else "0"
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    expected = "['approvals', 'agents']" if approvals_first else "['agents', 'approvals']"
    assert out.stdout.strip() == f"{expected} True True"


# --- 9. resuming after an approval is not a recovery ----------------------------------------


def test_a_run_resumed_after_its_approval_carries_no_recovery_note(sandbox, approver):
    bob = make_customer("bob-resume")
    order = order_for(bob, "B-2031", 64900, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=bob, subject="Refund", body="Please refund order B-2031")
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(approval_id=approval.pk, user=approver, approve=True)

    advance(ticket.pk)

    run = AgentRun.objects.get(ticket=ticket)
    assert run.status == RunStatus.COMPLETED and len(run.epochs) == 2
    assert run.recovery_notes == []
    assert not TicketEvent.objects.filter(ticket=ticket, kind="agent_run_recovered").exists()
    requests = ModelStep.objects.filter(run=run).values_list("request_messages", flat=True)
    assert not any("RECOVERY NOTE" in json.dumps(r) for r in requests)
    assert len(paid(sandbox, order)) == 1
    assert_money_invariants(sandbox, needed_approval={"B-2031"})


@pytest.fixture(autouse=True)
def _no_stray_doorbells():
    yield
    purge_broker()
