"""The money path's gates, as a second outside review found them open (2026-12-01).

- Every refund that may still happen counts toward the approval rules, whatever it waits on:
  a refund waiting for the customer's Confirm (approved or not) was counted nowhere, so two of
  them on one order, in one step or in two tickets, were paid over the threshold unreviewed.
- A person's decision on the ticket ends the agent's money: after a person took the ticket
  over, resolved or closed it, no approval, confirmation or recovery pays anything.
- The provider's record wins: a refund given up on while its request was still on its way is
  not failed while a worker holds the ticket, and if the provider shows it paid later, the
  ledger records it and counts it against the order.
- What staff approve is what is paid: the card shows the order's currency and facts however
  the model wrote the order number.
- A decision on a call the run cannot reach yet (the second card decided first) wakes nothing.

Each test reads the payment sandbox's own records (a separate process, over HTTP).
"""

from __future__ import annotations

import json

import pytest
from django.test import Client

from agents import refunds as refund_module
from agents.llm import ModelResponse, ToolCallRequest
from agents.models import AgentRun, ApprovalPolicy, CallStatus, Refund, RefundStatus, RunStatus, ToolCall
from agents.runner import advance
from agents.selectors import tickets_with_agent_work
from approvals import selectors as approval_selectors
from approvals import services as approval_services
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_money_path import assert_money_invariants, order_for, paid
from tests.agents.test_refunds import ScriptedRefund
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Order, OrderStatus, Ticket, TicketEvent

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]

THRESHOLD = 20000  # the default policy: refunds above $200.00 on one order need a staff approval


@pytest.fixture
def approver(db):  # noqa: ANN001
    return make_staff("gate-approver", can_decide=True)


class Calls:
    """A model that asks, in its first step, for the calls given ((tool, arguments), ...), then says it is done."""

    name = "scripted-calls"

    def __init__(self, *wanted: tuple[str, dict]) -> None:
        self.wanted = wanted

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        if any(m["role"] == "tool" for m in messages):
            return ModelResponse(text="Done.")
        return ModelResponse(
            text="",
            tool_calls=[
                ToolCallRequest(f"c{n}", name, json.dumps(arguments))
                for n, (name, arguments) in enumerate(self.wanted, start=1)
            ],
        )


class Refunds(Calls):
    """Calls asking for the refunds given ((order number, cents), ...)."""

    def __init__(self, *wanted: tuple[str, int]) -> None:
        super().__init__(*(("issue_refund", {"order_number": n, "amount_cents": cents}) for n, cents in wanted))


def only_the_order_threshold() -> None:
    """The policy's per-customer limit out of the way: only the per-order threshold applies."""
    policy = ApprovalPolicy.current()
    policy.customer_limit_cents = 10**9
    policy.save()


def confirm(ticket: Ticket, call: ToolCall) -> int:
    """The customer presses Confirm on the question in the chat."""
    client = Client()
    client.force_login(ticket.customer.user)
    call.refresh_from_db()
    answer = client.post(
        f"/tickets/{ticket.pk}/confirmations/{call.pk}",
        {"answer": "confirm", "digest": call.confirmation_digest},
        content_type="application/json",
    )
    return answer.status_code


def refund_calls(ticket: Ticket) -> list[ToolCall]:
    return list(ToolCall.objects.filter(ticket=ticket, name="issue_refund").order_by("run_id", "step__index", "index"))


def press_every_confirm(ticket: Ticket, model) -> None:  # noqa: ANN001
    """The customer confirms every question as it is asked, and the agent goes on each time."""
    for _ in range(4):
        asked = [
            c for c in refund_calls(ticket) if c.status == CallStatus.AWAITING_CONFIRMATION and c.confirmation_text
        ]
        if not asked:
            return
        for call in asked:
            assert confirm(ticket, call) == 200
        advance(ticket.pk, model=model)


def unreviewed_total(order: Order) -> int:
    """What the provider paid on the order for calls no approved request covers."""
    approved = set(
        ApprovalRequest.objects.filter(status=ApprovalStatus.APPROVED).values_list(
            "tool_call__idempotency_key", flat=True
        )
    )
    return sum(
        r.amount_cents
        for r in Refund.objects.filter(order=order, status=RefundStatus.SUCCEEDED)
        if r.idempotency_key not in approved
    )


# --- A refund waiting for the customer counts ------------------------------------------------


@pytest.mark.customer_confirms
def test_two_refunds_of_one_step_on_one_order_are_not_paid_over_the_threshold_unreviewed(sandbox):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "G-1001", 30000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund G-1001 please")
    model = Refunds(("G-1001", 15000), ("G-1001", 15000))

    advance(ticket.pk, model=model)
    first, second = refund_calls(ticket)

    assert first.status == CallStatus.AWAITING_CONFIRMATION and not first.approval_required
    assert second.approval_required and "second refund on order G-1001" in second.approval_reason
    press_every_confirm(ticket, model)
    assert sum(r["amount"] for r in paid(sandbox, order)) == 15000  # the second waits for staff
    assert unreviewed_total(order) <= THRESHOLD
    assert_money_invariants(sandbox, needed_approval={"G-1001"} if len(paid(sandbox, order)) > 1 else set())


@pytest.mark.customer_confirms
@pytest.mark.parametrize("model", ["scripted", "offline"])
def test_the_same_request_in_two_tickets_is_not_paid_over_the_threshold_unreviewed(sandbox, model):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "G-2001", 30000, sandbox)
    body = "Please refund $150.00 on order G-2001"
    agent = Refunds(("G-2001", 15000)) if model == "scripted" else None
    tickets = []
    for _ in range(2):
        ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=body)
        advance(ticket.pk, model=agent)
        tickets.append(ticket)

    (first,), (second,) = refund_calls(tickets[0]), refund_calls(tickets[1])

    assert first.status == CallStatus.AWAITING_CONFIRMATION and not first.approval_required
    assert second.status == CallStatus.AWAITING_APPROVAL
    assert "second refund on order G-2001 (the first was asked for in another ticket)" in second.approval_reason
    assert "$150.00 refunded or pending" in second.approval_reason
    for ticket in tickets:
        press_every_confirm(ticket, agent)
    assert [r["amount"] for r in paid(sandbox, order)] == [15000]
    assert unreviewed_total(order) <= THRESHOLD


@pytest.mark.customer_confirms
def test_an_approved_refund_waiting_for_the_customer_counts_for_the_next_request(sandbox, approver):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "G-3001", 50000, sandbox)
    first_ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund G-3001")
    advance(first_ticket.pk, model=Refunds(("G-3001", 25000)))  # above the threshold: staff first
    approval_services.approval_decide(
        approval_id=ApprovalRequest.objects.get(ticket=first_ticket).pk, user=approver, approve=True
    )
    advance(first_ticket.pk, model=Refunds(("G-3001", 25000)))
    (approved,) = refund_calls(first_ticket)
    assert approved.status == CallStatus.AWAITING_CONFIRMATION  # approved, now the customer's Confirm

    second_ticket, _ = ticket_services.ticket_open(customer=customer, subject="More", body="And $150 more on G-3001")
    advance(second_ticket.pk, model=Refunds(("G-3001", 15000)))
    (more,) = refund_calls(second_ticket)

    assert more.approval_required
    assert "G-3001 already has $250.00 refunded or pending, $150.00 more" in more.approval_reason
    press_every_confirm(first_ticket, Refunds(("G-3001", 25000)))
    assert [r["amount"] for r in paid(sandbox, order)] == [25000]
    assert unreviewed_total(order) == 0


@pytest.mark.parametrize("written", ["G-3101", " g-3101 "])
def test_a_refund_staff_rejected_is_not_paid_unreviewed_when_asked_again_in_a_new_ticket(sandbox, approver, written):  # noqa: ANN001
    """The second refund of one step on one order needs staff; staff reject it. Asked again in a new
    ticket (far below the threshold), it is reviewed again, not paid, and the card says staff said
    no to a refund on this order before."""
    customer = make_customer()
    order = order_for(customer, "G-3101", 50000, sandbox)
    first_ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund G-3101 twice")
    advance(first_ticket.pk, model=Refunds(("G-3101", 1000), ("G-3101", 5000)))
    rejected = ApprovalRequest.objects.get(ticket=first_ticket)
    assert "second refund" in rejected.reason
    approval_services.approval_decide(
        approval_id=rejected.pk, user=approver, approve=False, note="One refund on this order is enough."
    )
    advance(first_ticket.pk, model=Refunds(("G-3101", 1000), ("G-3101", 5000)))
    assert [r["amount"] for r in paid(sandbox, order)] == [1000]

    second_ticket, _ = ticket_services.ticket_open(customer=customer, subject="Again", body="Refund $50 on G-3101")
    advance(second_ticket.pk, model=Refunds((written, 5000)))

    (again,) = refund_calls(second_ticket)
    assert again.approval_required and again.status == CallStatus.AWAITING_APPROVAL
    assert f"staff declined a refund on order G-3101 before (ticket #{first_ticket.pk})" in again.approval_reason
    assert [r["amount"] for r in paid(sandbox, order)] == [1000]
    assert_money_invariants(sandbox)


# --- A person's decision on the ticket ends the agent's money -------------------------------


@pytest.mark.parametrize("then", ["resolve", "take_over", "close"])
def test_a_person_taking_the_ticket_ends_the_waiting_refund_and_withdraws_its_card(sandbox, approver, person, then):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "G-4001", 64900, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund G-4001")
    advance(ticket.pk, model=Refunds(("G-4001", 64900)))
    approval = ApprovalRequest.objects.get(ticket=ticket)
    ticket_services.ticket_take_over(ticket=ticket, user=person)
    if then == "resolve":
        ticket_services.ticket_resolve(ticket=ticket, user=person)
    elif then == "close":
        ticket_services.ticket_close(ticket=ticket, user=person)
    status = Ticket.objects.get(pk=ticket.pk).status

    with pytest.raises(approval_services.ApprovalClosed, match="the agent will not act on this request"):
        approval_services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    assert ticket.pk in tickets_with_agent_work()  # the run left waiting is work: it must end
    advance(ticket.pk, model=Refunds(("G-4001", 64900)))  # what the take-over's doorbell (or the sweeper) runs

    assert paid(sandbox, order) == []
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.HANDED_OFF
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.WITHDRAWN  # off the dashboard
    assert approval not in approval_selectors.approvals_pending()
    assert ToolCall.objects.get(ticket=ticket, name="issue_refund").status == CallStatus.FAILED
    assert Ticket.objects.get(pk=ticket.pk).status == status  # the person's status stands
    assert not ticket.messages.filter(author_kind="agent", is_public=True).exists()  # no reply on it either
    assert ticket.pk not in tickets_with_agent_work()  # and nothing left for the sweeper to ring
    if then == "take_over":
        # Handed back without a word from the person: the customer's request is unanswered, so the
        # agent answers it afresh (this model: in words, having seen its refund end unrun); the
        # withdrawn request pays nothing.
        ticket_services.ticket_hand_back(ticket=ticket, user=person)
        assert ticket.pk in tickets_with_agent_work()
        advance(ticket.pk, model=Refunds(("G-4001", 64900)))
        assert paid(sandbox, order) == []
        assert ticket.messages.filter(author_kind="agent", is_public=True).exists()
        assert ticket.pk not in tickets_with_agent_work()


@pytest.mark.parametrize("confirming", [False, True], ids=["approval", "confirmation"])
def test_a_customer_who_reopens_a_resolved_ticket_does_not_revive_the_refund_a_person_stopped(
    sandbox, approver, person, confirming, settings
):  # noqa: ANN001
    """A person took the ticket and resolved it; the customer writes again (the ticket reopens). The
    refund that waited before is not paid by a later decision: the run that waited ends, and the new
    message is answered by a new run."""
    settings.REFUND_CUSTOMER_CONFIRMATION = confirming
    customer = make_customer()
    order = order_for(customer, "G-4201", 64900 if not confirming else 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund G-4201")
    model = Refunds(("G-4201", 64900 if not confirming else 5000))
    advance(ticket.pk, model=model)
    (call,) = refund_calls(ticket)
    ticket_services.ticket_take_over(ticket=ticket, user=person)
    ticket_services.ticket_resolve(ticket=ticket, user=person)
    ticket_services.message_post(ticket=ticket, author_kind="customer", body="Thanks!")
    assert Ticket.objects.get(pk=ticket.pk).status == "open"

    if confirming:
        assert confirm(ticket, call) == 409  # refused: a person has had the ticket since it was asked
    else:
        with pytest.raises(approval_services.ApprovalClosed):
            approval_services.approval_decide(
                approval_id=ApprovalRequest.objects.get(ticket=ticket).pk, user=approver, approve=True
            )
    for _ in range(2):  # the run that waited ends; the customer's message is then answered by a new run
        advance(ticket.pk, model=model)

    assert paid(sandbox, order) == []
    runs = list(AgentRun.objects.filter(ticket=ticket).order_by("pk").values_list("status", flat=True))
    assert runs[0] == RunStatus.HANDED_OFF and len(runs) == 2
    assert ticket.messages.filter(author_kind="agent", is_public=True).exists()


@pytest.mark.customer_confirms
def test_a_confirm_pressed_after_staff_resolved_the_ticket_pays_nothing(sandbox, person):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "G-4101", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund G-4101")
    advance(ticket.pk, model=Refunds(("G-4101", 5000)))
    (call,) = refund_calls(ticket)
    assert call.status == CallStatus.AWAITING_CONFIRMATION
    ticket_services.ticket_resolve(ticket=ticket, user=person)

    assert confirm(ticket, call) == 409  # told a person has it; nothing done
    advance(ticket.pk, model=Refunds(("G-4101", 5000)))

    assert paid(sandbox, order) == []
    assert Ticket.objects.get(pk=ticket.pk).status == "resolved"
    call.refresh_from_db()
    assert call.status == CallStatus.CANCELLED  # the question is closed with the run
    assert confirm(ticket, call) == 409


@pytest.mark.parametrize("decision", ["reject", "approve"])
def test_a_refund_behind_a_paused_call_is_not_paid_after_the_ticket_is_closed(sandbox, approver, person, decision):  # noqa: ANN001
    """Confirmation off: the small refund is recorded to run behind the large one, which waits for
    staff. It never started; after a person closed the ticket, no decision makes it run."""
    customer = make_customer()
    only_the_order_threshold()
    large, small = order_for(customer, "G-5001", 50000, sandbox), order_for(customer, "G-5002", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund both")
    model = Refunds(("G-5001", 30000), ("G-5002", 5000))
    advance(ticket.pk, model=model)
    assert [c.status for c in refund_calls(ticket)] == [CallStatus.AWAITING_APPROVAL, CallStatus.STARTED]
    # The decision comes first, then a person closes the ticket before any worker applies it.
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(
        approval_id=approval.pk,
        user=approver,
        approve=decision == "approve",
        note="" if decision == "approve" else "no",
    )
    ticket_services.ticket_take_over(ticket=ticket, user=person)
    ticket_services.ticket_close(ticket=ticket, user=person)
    advance(ticket.pk, model=model)

    assert paid(sandbox, large) == [] and paid(sandbox, small) == []
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.HANDED_OFF
    assert [c.status for c in refund_calls(ticket)] == [CallStatus.FAILED, CallStatus.FAILED]  # closed, never run


@pytest.mark.customer_confirms
def test_a_read_and_a_refund_in_one_step_go_on_after_the_customer_confirms(sandbox):  # noqa: ANN001
    """The first call of the step (a lookup) is recorded to run; the refund behind it waits for the
    customer. The Confirm wakes the run, which runs both in order (a decision is held back only by an
    earlier call that waits for its own decision, not by one recorded to run)."""
    model = Calls(
        ("lookup_order", {"order_number": "G-5201"}),
        ("issue_refund", {"order_number": "G-5201", "amount_cents": 5000}),
    )

    customer = make_customer()
    order = order_for(customer, "G-5201", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund G-5201")
    advance(ticket.pk, model=model)
    (refund,) = refund_calls(ticket)
    assert confirm(ticket, refund) == 200

    assert ticket.pk in tickets_with_agent_work()  # the Confirm is work, even if its doorbell is lost
    advance(ticket.pk, model=model)

    assert [r["amount"] for r in paid(sandbox, order)] == [5000]
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.COMPLETED
    assert list(ToolCall.objects.filter(ticket=ticket).order_by("index").values_list("status", flat=True)) == [
        CallStatus.SUCCEEDED,
        CallStatus.SUCCEEDED,
    ]


def test_the_refund_behind_a_paused_call_runs_once_the_call_before_it_is_decided(sandbox, approver):  # noqa: ANN001
    """The same two refunds with nobody taking over: the small one waits for the large one's decision,
    then both run in order (the review's case must not stop the ordinary path)."""
    customer = make_customer()
    only_the_order_threshold()
    large, small = order_for(customer, "G-5101", 50000, sandbox), order_for(customer, "G-5102", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund both")
    model = Refunds(("G-5101", 30000), ("G-5102", 5000))
    advance(ticket.pk, model=model)
    assert paid(sandbox, small) == []

    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    advance(ticket.pk, model=model)

    assert [r["amount"] for r in paid(sandbox, large)] == [30000]
    assert [r["amount"] for r in paid(sandbox, small)] == [5000]
    assert_money_invariants(sandbox, needed_approval={"G-5101"})


# --- The provider's record wins ---------------------------------------------------------------


def test_a_refund_in_flight_past_the_bound_is_not_failed_while_its_worker_holds_the_ticket(sandbox, monkeypatch):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "G-6001", 10000, sandbox)
    create = refund_module.provider().create_refund
    seen = {}

    def slow_create(**kwargs):  # noqa: ANN003, ANN202
        # The request is on its way longer than REFUND_UNCERTAIN_AFTER_SECONDS: beat's reconciler runs
        # meanwhile, with its default bound, and the refund looks old enough to give up on.
        Refund.objects.filter(status=RefundStatus.SUBMITTED).update(
            updated_at=Refund.objects.get().created_at.replace(year=2000)
        )
        seen["reconciled"] = refund_module.reconcile_open_refunds()
        return create(**kwargs)

    monkeypatch.setattr(refund_module.provider(), "create_refund", slow_create)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $40 of G-6001")
    advance(ticket.pk, model=ScriptedRefund(json.dumps({"order_number": "G-6001", "amount_cents": 4000})))

    assert seen["reconciled"] == {RefundStatus.SUBMITTED: 1}  # left alone: the worker holds the ticket
    refund = Refund.objects.get()
    assert refund.status == RefundStatus.SUCCEEDED and refund.escalated_at is None
    assert ToolCall.objects.get(ticket=ticket, name="issue_refund").status == CallStatus.SUCCEEDED
    assert_money_invariants(sandbox)
    assert [r["amount"] for r in paid(sandbox, order)] == [4000]


def test_a_refund_failed_before_the_provider_showed_it_is_recorded_when_it_shows_and_counts_again(sandbox):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "G-7001", 10000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $40 of G-7001")
    advance(ticket.pk, model=ScriptedRefund(json.dumps({"order_number": "G-7001", "amount_cents": 4000})))
    # The ledger as a reconciler leaves it that gave up before the provider had the refund: failed, never
    # seen there (the worker's session was gone, its request still on the way).
    Refund.objects.update(status=RefundStatus.FAILED, provider_refund_id=None, provider_status="")
    assert refund_module.refunded_total_cents(order) == 0

    refund_module.reconcile_open_refunds()

    refund = Refund.objects.get()
    assert refund.status == RefundStatus.SUCCEEDED and refund.provider_refund_id
    assert refund_module.refunded_total_cents(order) == 4000  # counted against the order again
    assert TicketEvent.objects.filter(ticket=ticket, kind="refund_succeeded").count() == 2
    assert_money_invariants(sandbox)


def test_the_worker_records_a_refund_paid_after_it_was_given_up_on(sandbox, monkeypatch):  # noqa: ANN001
    """The reconciler failed the refund while its request was on its way (the worker's session had
    gone); the request then lands. The worker records it paid (failed -> succeeded), not an error."""
    customer = make_customer()
    order = order_for(customer, "G-7101", 10000, sandbox)
    create = refund_module.provider().create_refund

    def given_up_meanwhile(**kwargs):  # noqa: ANN003, ANN202
        Refund.objects.update(status=RefundStatus.FAILED, error="The provider has no refund under this key.")
        return create(**kwargs)

    monkeypatch.setattr(refund_module.provider(), "create_refund", given_up_meanwhile)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $40 of G-7101")
    advance(ticket.pk, model=ScriptedRefund(json.dumps({"order_number": "G-7101", "amount_cents": 4000})))

    assert Refund.objects.get().status == RefundStatus.SUCCEEDED
    assert ToolCall.objects.get(ticket=ticket, name="issue_refund").status == CallStatus.SUCCEEDED
    assert refund_module.refunded_total_cents(order) == 4000
    assert_money_invariants(sandbox)


# --- What staff see is what is paid -----------------------------------------------------------


@pytest.mark.parametrize("written", ["J-1001", " j-1001 "])
def test_the_card_shows_the_orders_currency_and_facts_however_the_number_is_written(sandbox, written):  # noqa: ANN001
    customer = make_customer(flagged=True)  # every refund reviewed
    order = Order.objects.create(
        customer=customer, number="J-1001", status=OrderStatus.DELIVERED, total_cents=100000, currency="jpy",
        payment_reference="pi_gate_jpy",
    )  # fmt: skip
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund J-1001")
    advance(ticket.pk, model=ScriptedRefund(json.dumps({"order_number": written, "amount_cents": 100000})))

    approval = ApprovalRequest.objects.get(ticket=ticket)
    (card,) = approval_selectors.approval_cards([approval])

    assert approval.currency == "jpy" and approval.amount_display == "¥100,000"
    assert approval_selectors.approval_confirmation_text(approval) == "I confirm a refund of ¥100,000"
    assert card.order_facts.startswith("J-1001: delivered, total ¥100,000")


# --- A decision the run cannot reach yet wakes nothing ----------------------------------------


def test_the_second_card_decided_first_leaves_the_run_paused_until_the_first_is(sandbox, approver):  # noqa: ANN001
    customer = make_customer(flagged=True)
    first, second = order_for(customer, "G-8001", 5000, sandbox), order_for(customer, "G-8002", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund both")
    model = Refunds(("G-8001", 1000), ("G-8002", 1000))
    advance(ticket.pk, model=model)
    card_one, card_two = ApprovalRequest.objects.order_by("tool_call__index")

    approval_services.approval_decide(approval_id=card_two.pk, user=approver, approve=True)
    outcome = advance(ticket.pk, model=model)

    assert not outcome.more_work  # nothing rings the ticket again
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.WAITING_APPROVAL
    assert ticket.pk not in tickets_with_agent_work()
    assert paid(sandbox, first) == [] and paid(sandbox, second) == []

    approval_services.approval_decide(approval_id=card_one.pk, user=approver, approve=True)
    advance(ticket.pk, model=model)

    assert [r["amount"] for r in paid(sandbox, first)] == [1000]
    assert [r["amount"] for r in paid(sandbox, second)] == [1000]
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.COMPLETED


@pytest.mark.parametrize("then", ["take_over", "close"])
def test_a_person_taking_the_ticket_while_the_step_is_written_stops_its_refund(sandbox, person, then):  # noqa: ANN001
    """Confirmation off: the take-over lands while the model writes the step that asks for the refund.
    The pass began before it, so only the check next to the effect can stop it."""
    customer = make_customer()
    order = order_for(customer, "G-9001", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund G-9001")

    class TakenOverMeanwhile(Refunds):
        def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
            if not any(m["role"] == "tool" for m in messages):
                ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
                if then == "close":
                    ticket_services.ticket_close(ticket=ticket.pk, user=person)
            return super().complete(messages=messages, tools=tools, on_token=on_token)

    outcome = advance(ticket.pk, model=TakenOverMeanwhile(("G-9001", 5000)))

    assert paid(sandbox, order) == []
    assert outcome.state == RunStatus.HANDED_OFF
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.HANDED_OFF
    (call,) = refund_calls(ticket)
    assert call.status == CallStatus.FAILED and "a person took the ticket over" in call.error
    assert not Refund.objects.exists()


@pytest.mark.customer_confirms
def test_an_expired_question_leaves_the_card_behind_it_to_staff_and_asks_the_customer_after(sandbox, approver):  # noqa: ANN001, E501
    """One step: a small refund for the customer to confirm, then a large one for staff. The customer
    never answers the small question: nothing of it is paid, and the run goes on to the large one (not
    answering one question does not take back the other request): its card stays on the dashboard, and
    once staff approve, the customer is asked to confirm it. Nothing is paid without both."""
    from datetime import timedelta

    from django.utils import timezone

    from agents.confirmation import confirmations_expire_due

    customer = make_customer()
    only_the_order_threshold()
    small, large = order_for(customer, "G-9101", 5000, sandbox), order_for(customer, "G-9102", 50000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund both")
    model = Refunds(("G-9101", 5000), ("G-9102", 30000))
    advance(ticket.pk, model=model)
    first, second = refund_calls(ticket)
    assert (first.status, second.status) == (CallStatus.AWAITING_CONFIRMATION, CallStatus.AWAITING_APPROVAL)
    card = ApprovalRequest.objects.get(ticket=ticket)
    assert card in approval_selectors.approvals_pending()

    assert confirmations_expire_due(now=timezone.now() + timedelta(days=1)) == 1
    advance(ticket.pk, model=model)

    first.refresh_from_db()
    assert first.status == CallStatus.CANCELLED
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.WAITING_APPROVAL
    card.refresh_from_db()
    assert card.status == ApprovalStatus.PENDING and card in approval_selectors.approvals_pending()
    assert paid(sandbox, small) == [] and paid(sandbox, large) == []

    approval_services.approval_decide(approval_id=card.pk, user=approver, approve=True)
    advance(ticket.pk, model=model)
    second.refresh_from_db()
    assert second.status == CallStatus.AWAITING_CONFIRMATION and second.confirmation_text
    assert paid(sandbox, small) == [] and paid(sandbox, large) == []


# --- Third review: a take-over the run's start did not see, a hand-back, a clean resume -------


def test_a_take_over_just_before_the_run_starts_stops_its_refund(sandbox, person, monkeypatch):  # noqa: ANN001
    """The pass read the ticket open; a person took it over before the run started. Its status now,
    not only its changes since the run started, stops the refund."""
    from agents import runner

    customer = make_customer()
    order = order_for(customer, "G-9201", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund G-9201")
    start = runner.agent_services.run_start

    def taken_over_first(**kwargs):  # noqa: ANN003, ANN202
        ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
        return start(**kwargs)

    monkeypatch.setattr(runner.agent_services, "run_start", taken_over_first)
    advance(ticket.pk, model=Refunds(("G-9201", 5000)))

    assert paid(sandbox, order) == []
    assert Ticket.objects.get(pk=ticket.pk).status == "with_human"
    assert not Refund.objects.exists()


def test_a_ticket_handed_back_to_the_agent_gives_it_its_waiting_refund_back(sandbox, approver, person):  # noqa: ANN001
    """A person takes the ticket and hands it back while the model writes the step that asks for a
    refund needing approval: the request can be decided, and the refund is paid once when approved."""
    customer = make_customer(flagged=True)
    order = order_for(customer, "G-9301", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund G-9301")

    class TakenAndHandedBack(Refunds):
        def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
            if not any(m["role"] == "tool" for m in messages):
                ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
                ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)
            return super().complete(messages=messages, tools=tools, on_token=on_token)

    model = TakenAndHandedBack(("G-9301", 5000))
    advance(ticket.pk, model=model)
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.WAITING_APPROVAL

    approval_services.approval_decide(
        approval_id=ApprovalRequest.objects.get(ticket=ticket).pk, user=approver, approve=True
    )
    advance(ticket.pk, model=Refunds(("G-9301", 5000)))

    assert [r["amount"] for r in paid(sandbox, order)] == [5000]
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.COMPLETED


def test_an_email_recorded_in_front_of_a_paused_refund_is_sent_after_the_decision(sandbox, approver, settings):  # noqa: ANN001
    """A clean pause is not a crash: the email the step asked for before the refund that waits for
    staff was never attempted, so it is sent after the decision, not recorded as "may have happened"."""
    from django.core import mail

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    customer = make_customer(flagged=True)
    order = order_for(customer, "G-9401", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund G-9401")

    model = Calls(
        ("notify_customer_by_email", {"subject": "Your refund", "body": "We are looking at it."}),
        ("issue_refund", {"order_number": "G-9401", "amount_cents": 5000}),
    )

    advance(ticket.pk, model=model)
    approval_services.approval_decide(
        approval_id=ApprovalRequest.objects.get(ticket=ticket).pk, user=approver, approve=True
    )
    advance(ticket.pk, model=model)

    assert len(mail.outbox) == 1
    statuses = list(ToolCall.objects.filter(ticket=ticket).order_by("index").values_list("status", flat=True))
    assert statuses == [CallStatus.SUCCEEDED, CallStatus.SUCCEEDED]
    assert [r["amount"] for r in paid(sandbox, order)] == [5000]
    assert AgentRun.objects.get(ticket=ticket).recovery_notes == []


@pytest.mark.parametrize("who", ["staff", "customer"])
def test_a_decision_that_meets_a_take_over_in_flight_waits_for_it_and_is_refused(sandbox, approver, person, who):  # noqa: ANN001
    """A person takes the ticket over while a staff member approves (or the customer confirms) its
    refund: the take-over's transaction holds the ticket and has not committed yet. The decision
    waits for it and is then refused; it is not recorded, and nobody is told "finishing it now"
    about a refund the agent will never make."""
    import threading

    from django.db import connection, transaction

    from agents.confirmation import ConfirmationClosed, confirmation_decide

    only_the_order_threshold()
    customer = make_customer()
    cents = 64900 if who == "staff" else 5000
    order = order_for(customer, "G-4801", cents, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund G-4801")
    with pytest.MonkeyPatch.context() as patch:
        from django.conf import settings

        patch.setattr(settings, "REFUND_CUSTOMER_CONFIRMATION", who == "customer")
        advance(ticket.pk, model=Refunds(("G-4801", cents)))
    (call,) = refund_calls(ticket)

    took, go, outcome = threading.Event(), threading.Event(), {}

    def take_over() -> None:
        try:
            with transaction.atomic():
                ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
                took.set()
                go.wait(20)
        finally:
            connection.close()

    def decide() -> None:
        try:
            if who == "staff":
                approval = ApprovalRequest.objects.get(ticket=ticket)
                outcome["result"] = approval_services.approval_decide(
                    approval_id=approval.pk, user=approver, approve=True
                ).status
            else:
                outcome["result"] = confirmation_decide(
                    ticket_id=ticket.pk, call_id=call.pk, user=customer.user, confirm=True,
                    digest=call.confirmation_digest,
                )  # fmt: skip
        except (approval_services.ApprovalClosed, ConfirmationClosed) as refused:
            outcome["refused"] = refused
        finally:
            connection.close()

    taking = threading.Thread(target=take_over)
    taking.start()
    assert took.wait(20)
    deciding = threading.Thread(target=decide)
    deciding.start()
    deciding.join(1.0)  # with the take-over holding the ticket, the decision waits
    go.set()
    taking.join(20)
    deciding.join(20)

    assert "refused" in outcome, outcome
    call.refresh_from_db()
    assert call.approval_decision is None and call.confirmation_decision is None
    assert not TicketEvent.objects.filter(ticket=ticket, kind__in=["approval_decided", "confirmation_decided"]).exists()
    advance(ticket.pk, model=Refunds(("G-4801", cents)))
    assert paid(sandbox, order) == []
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.HANDED_OFF
