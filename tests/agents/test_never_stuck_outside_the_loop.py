"""Never stuck, on paths outside the loop's own failure accounting (DESIGN.md, invariants 7 and 14).

- A model the deployment cannot build (a class gone, a setting missing) is a failure of the run:
  counted, backed off, then parked with a person, never a task failing on every sweep.
- A call that stops its worker every time it runs (its result too large for the worker's memory)
  is run again at most up to the failure limit, then the ticket is parked.
- A run waiting out its backoff is not rung again and again because a decided call waits on it.
- A customer who writes while the pass that pauses the run still holds the lease is told once
  that their message waits (the pause's acknowledgement), not left without a word until staff decide.
- A paused run whose taking up fails every time (its acknowledgement, or its resumption after the
  decision) is counted and parked, not failed on every sweep.
- A run that cannot be started at all (its profile cannot be chosen, the customer's messages cannot
  be taken in) is counted on the ticket and parked; handed back, the agent answers what waited.
"""

from __future__ import annotations

import pytest

from agents.llm import ModelResponse, ToolCallRequest, Usage
from agents.models import AgentProfile, AgentRun, CallStatus, ReplayPolicy, RunStatus, ToolCall
from agents.profiles import active_profile
from agents.runner import advance
from agents.selectors import ticket_has_agent_work, tickets_with_agent_work
from agents.services import PARKED_NOTE, WAITING_NOTE
from agents.tools import REGISTRY, Tool
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.conftest import CallsThenReplies, WorkerDied, retry_time_comes, rung_again_and_again
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, Ticket, TicketEvent, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)


class ModelThatCannotBeBuilt:
    """A ChatModel class whose construction fails (a key or endpoint missing after a deploy)."""

    name = "unbuildable"

    def __init__(self) -> None:
        raise RuntimeError("MODEL_ENDPOINT is not set")


def swept(ticket_id: int, *, passes: int, model=None) -> list[str]:  # noqa: ANN001
    """What the sweeper does, every few seconds, for as long as the ticket has work: a pass, and the
    retry a failed one scheduled when its time comes. The exceptions that failed a pass (the Celery
    task would fail the same way), uncounted by the run."""
    errors = []
    for _ in range(passes):
        try:
            outcome = advance(ticket_id, model=model)
        except Exception as exc:  # noqa: BLE001 - the Celery task would fail the same way
            errors.append(repr(exc))
            continue
        if outcome.state == "retry":
            retry_time_comes(ticket_id)
    return errors


def test_a_profile_whose_model_cannot_be_built_parks_the_ticket_instead_of_failing_forever(settings):
    """Bounded retries, then parked with a person: the sweeper must not ring this ticket forever."""
    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    base = active_profile()
    # The active version names a model class that cannot be built in this deployment.
    AgentProfile.objects.filter(pk=base.pk).update(
        model="tests.agents.test_never_stuck_outside_the_loop.ModelThatCannotBeBuilt"
    )
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Where is my order?")

    errors = swept(ticket.pk, passes=10)  # no test model: the profile's model, as in production

    ticket.refresh_from_db()
    runs = list(AgentRun.objects.filter(ticket=ticket).values_list("status", "failures"))
    assert ticket.status == TicketStatus.WITH_HUMAN, (
        f"after 10 passes the ticket is {ticket.status}, runs={runs}, "
        f"uncounted exceptions={len(errors)} (first: {errors[:1]})"
    )
    assert ticket.pk not in tickets_with_agent_work()


# --- A decided call on a run waiting out its backoff -----------------------------------------


def _gated(name: str, handler) -> Tool:  # noqa: ANN001
    return Tool(
        name=name,
        description="An action staff approve first.",
        parameters={"type": "object", "properties": {}, "additionalProperties": False},
        replay_policy=ReplayPolicy.KEYED,
        handler=handler,
        needs_approval=lambda ctx, args: "staff approve every one",
    )


def test_a_run_waiting_out_its_backoff_is_not_rung_again_and_again_for_an_approved_call(monkeypatch):
    """Two approved calls of one step; the first crashes, so the run waits out a backoff with the
    second still approved and waiting. During that wait nothing is due: the retry the task scheduled
    carries it on. But the sweeper's "decided" ignores the backoff, so every pass that finds the run
    in its backoff reports more work and rings itself again at once: a hot loop of doorbells (and
    the sweeper rings it every sweep) for the whole backoff, on every failure."""

    def crashes(ctx, args):  # noqa: ANN001, ANN202
        raise RuntimeError("the provider is down")

    monkeypatch.setitem(REGISTRY, "gated_a", _gated("gated_a", crashes))
    monkeypatch.setattr("agents.runner.retry_delay", lambda failures, retry_after=None: 30.0)  # a wait to be in
    monkeypatch.setitem(REGISTRY, "gated_b", _gated("gated_b", lambda ctx, args: {"ok": True}))
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Do both, please")
    model = CallsThenReplies("gated_a", "gated_b")
    assert advance(ticket.pk, model=model).state == RunStatus.WAITING_APPROVAL
    approver = make_staff("approver-r", can_decide=True)
    for approval in ApprovalRequest.objects.filter(ticket=ticket).order_by("pk"):
        approval_services.approval_decide(approval_id=approval.pk, user=approver, approve=True)

    failed = advance(ticket.pk, model=model)  # gated_a crashes: the run backs off
    assert failed.state == "retry", failed
    run = AgentRun.objects.get(ticket=ticket)
    assert run.status == RunStatus.RUNNING and run.retry_not_before is not None
    assert ToolCall.objects.get(ticket=ticket, name="gated_b").status == CallStatus.AWAITING_APPROVAL

    # Rung during the wait (the sweeper, or a duplicate doorbell): nothing to do until it is over.
    during = advance(ticket.pk, model=model)
    assert during.state == "idle"
    assert not during.more_work, "a pass that found the run in its backoff rings the ticket again at once"
    assert ticket.pk not in tickets_with_agent_work(), "the sweeper rings a run in its backoff"
    assert not ticket_has_agent_work(ticket.pk)


# --- A call that takes its worker down, every time ---------------------------------------------


class AsksForTheBigLookup:
    name = "asks-big-lookup"

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        if any(m["role"] == "tool" for m in messages):
            return ModelResponse(text="Here it is.")
        return ModelResponse(
            text="",
            tool_calls=[ToolCallRequest("k1", "big_lookup", "{}")],
            usage=Usage(10, 5),
            finish_reason="tool_calls",
        )


def test_a_call_that_kills_its_worker_every_time_is_not_run_again_forever(monkeypatch, settings):
    """A safe call whose effect takes the worker down (a lookup whose result blows the worker's
    memory) is run again by every worker that takes the lease over (recovery: "safe: run it again"),
    and each dies the same way. Nothing records or counts those deaths, so the ticket never reaches
    a person: the sweeper hands it to the next worker, forever (DESIGN.md, invariant 14)."""
    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    settings.AGENT_LEASE_SECONDS = 600  # the dead lease's heartbeat stays out of the way
    dying = {"now": False}

    def kills_the_worker(ctx, args):  # noqa: ANN001, ANN202
        dying["now"] = True
        raise WorkerDied()

    def hit(point: str) -> None:
        if point == "before_lease_release" and dying["now"]:
            raise WorkerDied()  # a dead process releases nothing

    monkeypatch.setitem(
        REGISTRY,
        "big_lookup",
        Tool(
            name="big_lookup",
            description="",
            parameters={"type": "object"},
            replay_policy=ReplayPolicy.SAFE,
            handler=kills_the_worker,
        ),
    )
    monkeypatch.setattr("agents.faults.hit", hit)
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Show me everything")

    deaths = rung_again_and_again(
        ticket.pk, AsksForTheBigLookup(), rings=8, before_each=lambda: dying.update(now=False)
    )

    ticket.refresh_from_db()
    run = AgentRun.objects.get(ticket=ticket)
    assert ticket.status == TicketStatus.WITH_HUMAN and run.status == RunStatus.FAILED, (
        f"{deaths} workers died on the same call; run {run.status} with failures={run.failures}, "
        f"ticket {ticket.status}; the call was run {ToolCall.objects.get(ticket=ticket).attempts} times"
    )


# --- A customer message that arrives while the pass that pauses the run still holds the lease ----


def test_a_message_sent_while_the_run_is_pausing_is_acknowledged(monkeypatch):
    """DESIGN.md: a customer who writes during a pause is told once that their message is queued
    (``acknowledge_while_paused``). One who writes while the pass that pauses is still running finds
    the lease busy; that pass, once paused, sees no work (paused runs' messages are not work), rings
    nothing, and the sweeper never picks a paused ticket up: no acknowledgement until staff decide."""
    monkeypatch.setitem(REGISTRY, "gated_a", _gated("gated_a", lambda ctx, args: {"ok": True}))
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Do it, please")
    sent = {}

    class AsksAndTheCustomerWrites:
        name = "asks-and-customer-writes"

        def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
            # The customer's next message lands while this pass holds the lease (its doorbell: "busy").
            sent["m"], _ = ticket_services.message_post(
                ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, author_user=ticket.customer.user,
                body="Any news?", client_msg_id="c-any-news",
            )  # fmt: skip
            # (Its doorbell finds this pass's lease held: another worker's advance returns "busy".)
            return ModelResponse(text="", tool_calls=[ToolCallRequest("a1", "gated_a", "{}")], usage=Usage(10, 5),
                                 finish_reason="tool_calls")  # fmt: skip

    outcome = advance(ticket.pk, model=AsksAndTheCustomerWrites())
    assert outcome.state == RunStatus.WAITING_APPROVAL

    acknowledged = Message.objects.filter(ticket=ticket, client_msg_id=f"waiting:{sent['m'].pk}", body=WAITING_NOTE)
    assert acknowledged.exists() or outcome.more_work or ticket.pk in tickets_with_agent_work(), (
        "the message sent during the pausing pass is never acknowledged: no ring, and the sweeper skips it"
    )


def test_a_run_a_person_took_over_ends_without_building_its_model(monkeypatch, person):  # noqa: ANN001
    """The run only ends (a person has the ticket): a model this deployment cannot build is not asked
    for, so the run ends handed off instead of failing and parking over the person's head."""
    monkeypatch.setitem(REGISTRY, "gated_a", _gated("gated_a", lambda ctx, args: {"ok": True}))
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Do it, please")

    class AsksForIt:
        name = "asks-for-it"

        def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
            return ModelResponse(text="", tool_calls=[ToolCallRequest("a1", "gated_a", "{}")], usage=Usage(10, 5))

    assert advance(ticket.pk, model=AsksForIt()).state == RunStatus.WAITING_APPROVAL
    run = AgentRun.objects.get(ticket=ticket)
    AgentProfile.objects.filter(pk=run.profile_id).update(
        model="tests.agents.test_never_stuck_outside_the_loop.ModelThatCannotBeBuilt"
    )
    ticket_services.ticket_take_over(ticket=ticket.pk, user=person)

    outcome = advance(ticket.pk)  # the profile's model, as in production

    run.refresh_from_db()
    assert (outcome.state, run.status, run.failures) == (RunStatus.HANDED_OFF, RunStatus.HANDED_OFF, 0)
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN


# --- A failure in resuming a paused run, before the pass drives it -----------------------------


@pytest.mark.parametrize("where", ["acknowledge", "resume"])
def test_a_paused_run_that_fails_every_time_it_is_taken_up_is_counted_and_parked(monkeypatch, settings, where):
    """A pass fails while it takes up a paused run, before it drives it: telling a customer who wrote
    during the pause that their message waits, or resuming the run after the decision. The failure
    was outside the run's counted step: the task failed, the sweeper rang it again a few seconds
    later, and again, for ever (DESIGN.md, invariant 14). Now it is counted like a failed step."""
    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    monkeypatch.setitem(REGISTRY, "gated_a", _gated("gated_a", lambda ctx, args: {"ok": True}))
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Do it, please")
    model = CallsThenReplies("gated_a")
    assert advance(ticket.pk, model=model).state == RunStatus.WAITING_APPROVAL
    if where == "acknowledge":
        ticket_services.message_post(
            ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, author_user=ticket.customer.user, body="Any news?"
        )

        def fails(**kwargs):  # noqa: ANN003, ANN202
            raise RuntimeError("the acknowledgement cannot be written")

        monkeypatch.setattr("agents.services.acknowledge_while_paused", fails)
    else:
        approver = make_staff("approver-p", can_decide=True)
        approval_services.approval_decide(
            approval_id=ApprovalRequest.objects.get(ticket=ticket).pk, user=approver, approve=True
        )

        def fails(**kwargs):  # noqa: ANN003, ANN202
            raise RuntimeError("the run's decided calls cannot be read")

        monkeypatch.setattr("agents.runner.decided_calls", fails)

    errors = swept(ticket.pk, passes=8, model=model)

    ticket.refresh_from_db()
    run = AgentRun.objects.get(ticket=ticket)
    assert ticket.status == TicketStatus.WITH_HUMAN and run.status == RunStatus.FAILED, (
        f"run {run.status} with failures={run.failures}, ticket {ticket.status}, "
        f"uncounted exceptions={len(errors)} (first: {errors[:1]})"
    )
    assert errors == []
    assert ticket.pk not in tickets_with_agent_work()


# --- A failure in starting a run at all: no run to count it on ------------------------------------


@pytest.mark.parametrize("where", ["profile", "start"])
def test_a_run_that_cannot_be_started_is_counted_on_the_ticket_and_parked(monkeypatch, settings, where):
    """Choosing the new run's profile, or taking the customer's messages into it, fails every time.
    There was no run to count the failure on: the task failed, and the sweeper rang the ticket
    again and again, for ever, with the customer unanswered and no person told (invariant 14). Now
    each failure is counted on the ticket's timeline and backed off; at the limit the ticket is
    parked with a person, and the customer told once. Handed back (the fault mended), the agent
    answers the message that waited."""
    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Where is my order?")

    def fails(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise RuntimeError("the run cannot be started")

    monkeypatch.setattr(
        "agents.runner.profile_for_new_run" if where == "profile" else "agents.services.run_start", fails
    )
    outcomes = []
    for _ in range(2):  # the first failures back off, the task retrying later
        outcomes.append(advance(ticket.pk).state)
        retry_time_comes(ticket.pk)
    errors = swept(ticket.pk, passes=6)

    ticket.refresh_from_db()
    counted = list(
        TicketEvent.objects.filter(ticket=ticket, kind="agent_run_start_failed").values_list("payload", flat=True)
    )
    assert outcomes == ["retry", "retry"]
    assert errors == []
    assert ticket.status == TicketStatus.WITH_HUMAN, f"ticket {ticket.status} after {len(counted)} counted failures"
    assert [c["failures"] for c in counted] == [1, 2, 3]
    assert "the run cannot be started" in counted[-1]["error"]
    assert not AgentRun.objects.filter(ticket=ticket).exists()
    assert ticket.pk not in tickets_with_agent_work()
    system = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.SYSTEM)
    assert [m.body for m in system.filter(is_public=True)] == [PARKED_NOTE]
    assert "the run cannot be started" in system.get(is_public=False).body

    # Mended and handed back: a fresh count, and the customer's message is answered.
    monkeypatch.undo()
    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    ticket_services.ticket_hand_back(ticket=ticket.pk, user=make_staff("fixer", can_decide=True))
    assert advance(ticket.pk).state == RunStatus.COMPLETED  # the offline model, as in production
    run = AgentRun.objects.get(ticket=ticket)
    assert run.input_message_ids == [Message.objects.get(ticket=ticket, author_kind=AuthorKind.CUSTOMER).pk]
    assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).count() == 1
