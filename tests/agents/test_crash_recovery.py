"""Crashes, races and stalls with real Celery worker processes.

Each test starts real workers (``celery -A support worker``) against the test
database, kills or stops them at named fault points, starts a fresh worker and
Celery beat (whose sweeper re-rings orphaned tickets), and then checks the
ledger: every ticket at rest, no reply twice, no completed step generated again.
"""

from __future__ import annotations

import signal
import time

import pytest
from django.db.models import Count

from agents.models import AgentRun, CallStatus, ModelStep, RunStatus, StepStatus, TicketLease, ToolCall
from agents.tasks import advance_ticket
from tests.conftest import make_customer, make_order
from tests.workers import Cluster, purge_broker, wait_until
from tickets import realtime
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, Ticket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(180)]


def at_rest(ticket: Ticket) -> bool:
    if Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True).exists():
        return False
    runs = AgentRun.objects.filter(ticket=ticket)
    return runs.exists() and not runs.filter(status=RunStatus.RUNNING).exists()


def replies(ticket: Ticket) -> list[str]:
    return list(
        Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, is_public=True).values_list(
            "body", flat=True
        )
    )


def assert_no_step_generated_twice(ticket: Ticket) -> None:
    completed = (
        ModelStep.objects.filter(ticket=ticket, status=StepStatus.COMPLETED)
        .values("run", "index")
        .annotate(n=Count("id"))
    )
    assert completed and all(row["n"] == 1 for row in completed)


def open_ticket(body: str, order_number: str = "") -> Ticket:
    customer = make_customer()
    if order_number:
        make_order(customer, number=order_number)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Help", body=body)
    return ticket


def crash_then_recover(cluster: Cluster, ticket: Ticket, fault: str, **worker_env: str) -> None:
    doomed = cluster.worker(faults=fault, **worker_env)
    doomed.wait_dead(timeout=60)
    assert doomed.popen.returncode == -signal.SIGKILL, doomed.log()
    assert not at_rest(ticket)
    cluster.worker()
    cluster.beat()
    wait_until(lambda: at_rest(ticket), timeout=60, what="the ticket to come to rest", cluster=cluster)


def test_crash_after_a_model_step_is_stored_reuses_the_step(cluster):
    ticket = open_ticket("Where is my order A-8101?", "A-8101")

    crash_then_recover(cluster, ticket, "after_step_stored")

    assert_no_step_generated_twice(ticket)
    first = ModelStep.objects.get(ticket=ticket, index=0)
    run = AgentRun.objects.get(ticket=ticket)
    assert first.attempt == 1 and first.epoch == run.epochs[0]  # stored by the dead worker, reused after
    assert len(run.epochs) == 2
    assert ModelStep.objects.filter(ticket=ticket).count() == 2
    assert len(replies(ticket)) == 1 and "A-8101" in replies(ticket)[0]


def test_crash_after_a_call_is_started_runs_the_safe_call_again_once(cluster):
    ticket = open_ticket("Where is my order A-8102?", "A-8102")

    crash_then_recover(cluster, ticket, "after_call_started")

    call = ToolCall.objects.get(ticket=ticket)
    assert (call.name, call.status, call.attempts) == ("lookup_order", CallStatus.SUCCEEDED, 2)
    assert_no_step_generated_twice(ticket)
    assert len(replies(ticket)) == 1


def test_crash_after_a_safe_effect_whose_outcome_waited_for_the_next_step_runs_it_again(cluster):
    ticket = open_ticket("Where is my order A-8106?", "A-8106")

    crash_then_recover(cluster, ticket, "after_safe_effect")

    call = ToolCall.objects.get(ticket=ticket)
    # The outcome was only in the dead worker's memory: the call was still started, so it ran again.
    assert (call.name, call.status, call.attempts) == ("lookup_order", CallStatus.SUCCEEDED, 2)
    assert call.result["order_number"] == "A-8106"
    assert_no_step_generated_twice(ticket)
    assert len(replies(ticket)) == 1 and "A-8106" in replies(ticket)[0]


def test_crash_after_a_keyed_effect_reconciles_instead_of_repeating(cluster):
    ticket = open_ticket("I want to talk to a person")

    crash_then_recover(cluster, ticket, "after_keyed_effect")

    call = ToolCall.objects.get(ticket=ticket, name="hand_off_to_human")
    assert call.status == CallStatus.SUCCEEDED and call.attempts == 1  # proven by reconcile, not run again
    notes = Message.objects.filter(ticket=ticket, is_public=False, body__startswith="Handed off")
    assert notes.count() == 1
    ticket.refresh_from_db()
    assert ticket.status == "with_human"
    run = AgentRun.objects.get(ticket=ticket)
    assert run.status == RunStatus.HANDED_OFF
    assert run.recovery_notes[-1]["reconciled"][0]["tool"] == "hand_off_to_human"


def test_crash_after_a_never_effect_marks_it_uncertain_and_tells_the_model(cluster):
    ticket = open_ticket("Please email me a summary of my request")

    crash_then_recover(cluster, ticket, "after_never_effect")

    call = ToolCall.objects.get(ticket=ticket, name="notify_customer_by_email")
    assert call.status == CallStatus.UNCERTAIN
    assert len(list(cluster.mail_dir.iterdir())) == 1  # sent once, never repeated
    run = AgentRun.objects.get(ticket=ticket)
    note = run.recovery_notes[-1]
    assert "notify_customer_by_email" in note["text"] and "uncertain" in note["text"]
    last_request = ModelStep.objects.filter(ticket=ticket, status=StepStatus.COMPLETED).last().request_messages
    assert any("RECOVERY NOTE" in (m.get("content") or "") for m in last_request)
    assert ticket.events.filter(kind="tool_call_uncertain").count() == 1
    assert len(replies(ticket)) == 1 and "check your inbox" in replies(ticket)[0]
    # The customer reads words written for them: neither the model's note on the uncertain call, nor
    # "could not send" beside "may already have gone out".
    assert "may or may not" not in replies(ticket)[0] and "couldn't send" not in replies(ticket)[0]


def test_crash_in_the_middle_of_streaming_generates_only_that_step_again(cluster):
    ticket = open_ticket("Where is my order A-8105?", "A-8105")

    crash_then_recover(cluster, ticket, "mid_stream:3")

    steps = list(ModelStep.objects.filter(ticket=ticket).order_by("index", "attempt"))
    assert [(s.index, s.attempt, s.status) for s in steps] == [
        (0, 1, StepStatus.COMPLETED),
        (1, 1, StepStatus.INTERRUPTED),
        (1, 2, StepStatus.COMPLETED),
    ]
    assert steps[1].wasted_tokens > 0
    assert AgentRun.objects.get(ticket=ticket).wasted_tokens == steps[1].wasted_tokens
    assert_no_step_generated_twice(ticket)
    assert len(replies(ticket)) == 1


def test_duplicated_deliveries_and_two_racing_workers_answer_once(cluster):
    cluster.worker()
    cluster.worker()
    tickets = [open_ticket(f"Where is my order A-82{n:02d}?", f"A-82{n:02d}") for n in range(4)]
    for ticket in tickets:
        for _ in range(6):  # the doorbell rung many times over
            advance_ticket.delay(ticket.pk)

    for ticket in tickets:
        wait_until(lambda t=ticket: at_rest(t), timeout=60, what=f"ticket {ticket.pk} at rest", cluster=cluster)
    time.sleep(1)  # let the duplicate deliveries drain

    for ticket in tickets:
        assert len(replies(ticket)) == 1
        assert AgentRun.objects.filter(ticket=ticket).count() == 1
        assert_no_step_generated_twice(ticket)
    workers_used = {s.epoch for s in ModelStep.objects.filter(ticket__in=tickets)}
    assert workers_used  # every step was written under some lease epoch


def test_a_flushed_broker_delays_work_but_does_not_lose_it(cluster):
    ticket = open_ticket("What is your refund policy?")
    purge_broker()  # the doorbell for this message is gone

    # No beat: the sweep a worker asks for when it starts finds the ticket's work in the ledger.
    cluster.worker()
    wait_until(
        lambda: at_rest(ticket), timeout=30, what="the worker's first sweep to re-ring the ticket", cluster=cluster
    )
    assert len(replies(ticket)) == 1


def test_a_worker_stopped_past_its_lease_cannot_write_after_another_took_over(cluster):
    ticket = open_ticket("Where is my order A-8107?", "A-8107")
    slow = cluster.worker(OFFLINE_MODEL_TOKEN_DELAY_MS="150")

    wait_until(
        lambda: realtime.streamed_so_far(ticket.pk)[0] is not None,
        timeout=30,
        what="the answer to start streaming",
        cluster=cluster,
    )
    slow.signal(signal.SIGSTOP)
    stale_epoch = TicketLease.objects.get(ticket=ticket).epoch
    cluster.worker()
    cluster.beat()
    wait_until(lambda: at_rest(ticket), timeout=60, what="another worker to finish the turn", cluster=cluster)
    assert TicketLease.objects.get(ticket=ticket).epoch > stale_epoch

    slow.signal(signal.SIGCONT)
    wait_until(lambda: "lease lost" in slow.log(), timeout=30, what="the stale worker to be fenced", cluster=cluster)

    assert len(replies(ticket)) == 1
    assert_no_step_generated_twice(ticket)
    stale_steps = ModelStep.objects.filter(ticket=ticket, epoch=stale_epoch)
    assert stale_steps.exists()
    assert not stale_steps.filter(status=StepStatus.COMPLETED, index=1).exists()  # its late answer was refused


def test_a_dead_owner_is_taken_over_before_its_lease_expires(cluster):
    """At the default lease (60 s), a SIGKILLed owner's ticket is taken over as soon as the sweeper
    rings: its advisory lock died with its connection, so nobody waits for the lease to expire."""
    ticket = open_ticket("Where is my order A-8108?", "A-8108")
    defaults = {"AGENT_LEASE_SECONDS": "60", "AGENT_SWEEP_SECONDS": "1"}
    doomed = cluster.worker(faults="after_step_stored", **defaults)
    doomed.wait_dead(timeout=60)
    assert doomed.popen.returncode == -signal.SIGKILL, doomed.log()
    dead_lease = TicketLease.objects.get(ticket=ticket)
    assert dead_lease.owner and dead_lease.session_locked

    cluster.worker(**defaults)
    cluster.beat()
    wait_until(lambda: at_rest(ticket), timeout=45, what="another worker to finish the turn", cluster=cluster)

    taken = TicketLease.objects.get(ticket=ticket)
    run = AgentRun.objects.get(ticket=ticket)
    recovered = ticket.events.get(kind="agent_run_recovered")
    assert taken.previous_owner == dead_lease.owner or taken.epoch > dead_lease.epoch + 1
    assert recovered.created_at < dead_lease.expires_at  # taken over well before the 60 s lease ran out
    assert len(run.epochs) == 2 and run.recovery_notes
    assert len(replies(ticket)) == 1
    assert_no_step_generated_twice(ticket)
