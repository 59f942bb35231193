"""What the model asks for, probed from outside (2026-12-05): the rules enforced at execution hold
whatever shape the model's refund calls take.

- Arguments of odd shape (an amount as text, negative, huge, missing; an unknown argument; a key
  written twice; text that is not JSON; a currency that is not the order's): refused, or judged on
  what is recorded, never paid on what the model may have meant.
- Several refunds in one step, and in consecutive steps of one turn under one reused call id:
  each counts for the next, whatever order and whatever id.
- Asked again after staff said no, for less, in the same ticket: reviewed again; asked again after
  staff said yes: reviewed again, and more than the order has left is refused before any card.
- An amount of 5000 digits (valid JSON Python will not read) is refused to the model, not a failed step.
- Two refunds in one answer of an endpoint that streams every call under index 0 (Ollama), over
  real HTTP: two calls, each judged, not one call of both arguments run together.

Each test reads the payment sandbox's own records (a separate process, over HTTP).
"""

from __future__ import annotations

import pytest

from agents.llm import ModelResponse, ToolCallRequest
from agents.llm_openai import OpenAIChatModel
from agents.models import AgentRun, CallStatus, RunStatus
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.openai_server import OpenAIServer
from tests.agents.test_money_gates import THRESHOLD, refund_calls
from tests.agents.test_money_path import assert_money_invariants, order_for, paid, write
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import TicketStatus

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]


@pytest.fixture
def approver(db):  # noqa: ANN001
    return make_staff("shape-approver", can_decide=True)


class Steps:
    """A model that asks, in its n-th step, for the n-th list of calls ((id, arguments as written), ...)
    to ``issue_refund``, or ((id, tool, arguments as written), ...), then says it is done."""

    name = "scripted-steps"

    def __init__(self, *steps: list[tuple[str, ...]]) -> None:
        self.steps = steps

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        asked = sum(1 for m in messages if m["role"] == "assistant" and m.get("tool_calls"))
        if asked >= len(self.steps):
            return ModelResponse(text="Done.")
        calls = [(c[0], "issue_refund", c[1]) if len(c) == 2 else c for c in self.steps[asked]]
        return ModelResponse(text="", tool_calls=[ToolCallRequest(*c) for c in calls])


def refund(number: str, cents: int) -> str:
    return f'{{"order_number": "{number}", "amount_cents": {cents}}}'


@pytest.mark.parametrize(
    "raw",
    [
        '{"order_number": "S-1001", "amount_cents": "5000"}',
        '{"order_number": "S-1001", "amount_cents": -5000}',
        '{"order_number": "S-1001", "amount_cents": 18446744073709551617}',
        '{"order_number": "S-1001", "amount_cents": 1e400}',
        '{"order_number": "S-1001", "amount_cents": ' + "9" * 5000 + "}",
        '{"order_number": "S-1001", "amount_cents": NaN}',
        '{"order_number": "S-1001", "amount_cents": true}',
        '{"order_number": "S-1001"}',
        '{"order_number": "S-1001", "amount_cents": 5\u0660\u0660\u0660}',
        '{"order_number": "S-1001", "amount_cents": 5000, "approved_by_staff": true}',
        '{"order_number": "S-1001", "amount_cents": 5000, "currency": "eur"}',
        '{"order_number": "S-1001", "amount_cents": 5000, "order_number": "S-9001"}',
        "refund S-1001 5000",
        '[{"order_number": "S-1001", "amount_cents": 5000}]',
    ],
    ids=[
        "text",
        "negative",
        "huge",
        "infinite",
        "five-thousand-digits",
        "nan",
        "boolean",
        "missing",
        "unicode-digits",
        "unknown-argument",
        "other-currency",
        "other-customers-order-written-second",
        "not-json",
        "a-list",
    ],
)
def test_a_refund_asked_with_arguments_of_odd_shape_is_refused_and_nothing_is_paid(sandbox, raw):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "S-1001", 30000, sandbox)
    stranger = order_for(make_customer(), "S-9001", 30000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund S-1001")

    advance(ticket.pk, model=Steps([("r1", raw)]))

    (call,) = refund_calls(ticket)
    assert call.status == CallStatus.FAILED, (call.status, call.arguments, call.error)
    assert paid(sandbox, order) == [] and paid(sandbox, stranger) == []


def test_an_amount_too_long_to_read_is_refused_to_the_model_and_the_next_model_reads_past_it(sandbox):  # noqa: ANN001
    """5000 digits are valid JSON that Python will not read (ValueError, not a JSONDecodeError): the call
    is refused as an error the model sees, and the offline model, answering the customer's next
    message over a conversation that holds it, answers rather than failing every step."""
    customer = make_customer()
    order = order_for(customer, "S-1501", 30000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund S-1501")
    advance(ticket.pk, model=Steps([("r1", '{"order_number": "S-1501", "amount_cents": ' + "9" * 5000 + "}")]))
    (call,) = refund_calls(ticket)
    assert call.status == CallStatus.FAILED and "too long" in call.error, call.error

    write(ticket, "Where is my order S-1501?")
    advance(ticket.pk)

    runs = list(AgentRun.objects.filter(ticket=ticket).order_by("pk"))
    assert [(run.status, run.failures) for run in runs] == [(RunStatus.COMPLETED, 0)] * 2
    assert paid(sandbox, order) == []


def test_an_amount_written_twice_is_judged_and_shown_to_staff_as_the_amount_that_would_be_paid(sandbox, approver):  # noqa: ANN001
    """The model writes the amount twice (50.00, then 250.00): the rules, the card and the payment all
    read the last, so a refund above the threshold is reviewed for that amount and paid only so."""
    customer = make_customer()
    order = order_for(customer, "S-2001", 30000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund S-2001")
    model = Steps([("r1", '{"order_number": "S-2001", "amount_cents": 5000, "amount_cents": 25000}')])

    advance(ticket.pk, model=model)

    (call,) = refund_calls(ticket)
    assert call.approval_required and call.status == CallStatus.AWAITING_APPROVAL, call.approval_reason
    card = ApprovalRequest.objects.get(tool_call=call)
    assert card.amount_cents == 25000
    assert paid(sandbox, order) == []
    approval_services.approval_decide(approval_id=card.pk, user=approver, approve=True)
    advance(ticket.pk, model=model)
    assert [r["amount"] for r in paid(sandbox, order)] == [25000]
    assert_money_invariants(sandbox, needed_approval={"S-2001"})


@pytest.mark.parametrize(
    ("asked", "unreviewed"),
    [
        ((("S-3001", 15000), ("S-3002", 15000)), [15000]),  # together past the customer's limit
        # The one above waits for staff, and counts toward the customer's limit while it waits.
        ((("S-3001", THRESHOLD + 1), ("S-3002", 5000)), []),
        ((("S-3002", 5000), ("S-3001", THRESHOLD + 1)), [5000]),
        ((("S-3001", 5000), ("s-3001", 5000)), [5000]),  # one order, written twice
        # Written with a long s, which Postgres and Python both read as S: the same order, counted so.
        ((("S-3001", 5000), ("\u017f-3001", 5000)), [5000]),
    ],
    ids=["two-orders-past-the-limit", "above-then-below", "below-then-above", "one-order-twice", "long-s"],
)
def test_several_refunds_of_one_step_each_count_for_the_next(sandbox, approver, asked, unreviewed):  # noqa: ANN001
    customer = make_customer()
    orders = [order_for(customer, number, 30000, sandbox) for number in ("S-3001", "S-3002")]
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund both")

    model = Steps([(f"r{n}", refund(number, cents)) for n, (number, cents) in enumerate(asked)])

    advance(ticket.pk, model=model)
    reviewed = [c for c in refund_calls(ticket) if c.status == CallStatus.AWAITING_APPROVAL]
    assert len(reviewed) == len(asked) - len(unreviewed), [c.approval_reason for c in refund_calls(ticket)]
    for card in ApprovalRequest.objects.filter(ticket=ticket):  # staff say no: the others are paid
        approval_services.approval_decide(approval_id=card.pk, user=approver, approve=False, note="No.")
    advance(ticket.pk, model=model)

    assert sorted(r["amount"] for order in orders for r in paid(sandbox, order)) == unreviewed
    assert_money_invariants(sandbox)


def test_refunds_asked_step_after_step_under_one_call_id_are_each_reviewed_and_a_no_holds(sandbox, approver):  # noqa: ANN001
    """One turn, one call id reused in every step: $150.00 on S-4001 (paid), $150.00 more on S-4001
    (second refund: staff say no), $150.00 on S-4002 (past the customer's limit: staff say no), then
    $10.00 on S-4001 again in the same ticket (staff said no on that order: reviewed)."""
    customer = make_customer()
    first = order_for(customer, "S-4001", 30000, sandbox)
    second = order_for(customer, "S-4002", 30000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund everything")
    model = Steps(
        [("c1", refund("S-4001", 15000))],
        [("c1", refund("S-4001", 15000))],
        [("c1", refund("S-4002", 15000))],
        [("c1", refund("S-4001", 1000))],
    )
    reasons = []

    advance(ticket.pk, model=model)
    for _ in range(3):
        card = ApprovalRequest.objects.get(ticket=ticket, status=ApprovalStatus.PENDING)
        reasons.append(card.reason)
        approval_services.approval_decide(approval_id=card.pk, user=approver, approve=False, note="No.")
        advance(ticket.pk, model=model)

    assert "second refund on order S-4001" in reasons[0]
    assert "refunds to one customer above" in reasons[1]
    assert "staff declined a refund on order S-4001 before" in reasons[2]
    assert [r["amount"] for r in paid(sandbox, first)] == [15000]
    assert paid(sandbox, second) == []
    assert [c.status for c in refund_calls(ticket)] == [CallStatus.SUCCEEDED] + [CallStatus.REJECTED] * 3
    assert_money_invariants(sandbox)


@pytest.mark.parametrize("first", ["refund", "hand_off"])
def test_a_refund_asked_next_to_a_hand_off_is_paid_only_before_it_and_never_after_a_hand_back(sandbox, person, first):  # noqa: ANN001
    """In one step, a refund and a hand-off to a person: asked before the hand-off it is paid; asked
    after it, the run ends for the person first and the refund is closed unpaid, and the person
    handing the ticket back does not bring it back."""
    customer = make_customer()
    order = order_for(customer, "S-5001", 30000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund S-5001")
    asked = [("c1", refund("S-5001", 5000)), ("c2", "hand_off_to_human", '{"reason": "The customer asked."}')]
    model = Steps(asked if first == "refund" else asked[::-1])

    advance(ticket.pk, model=model)
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN
    ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)
    advance(ticket.pk, model=model)
    advance(ticket.pk, model=model)

    (call,) = refund_calls(ticket)  # the model asks nothing more after the hand-back
    if first == "refund":
        assert call.status == CallStatus.SUCCEEDED
    else:
        assert call.status == CallStatus.FAILED and "not run" in call.error, (call.status, call.error)
    assert [r["amount"] for r in paid(sandbox, order)] == ([5000] if first == "refund" else [])
    assert_money_invariants(sandbox)


@pytest.mark.parametrize("dialect", ["openai", "ollama"])
def test_two_refunds_streamed_in_one_answer_are_two_calls_whatever_index_the_server_gives(sandbox, approver, dialect):  # noqa: ANN001
    """$150.00 on each of two orders, in one streamed answer: the first is paid, the second (past the
    customer's limit) waits for staff and is not paid when they say no."""
    customer = make_customer()
    orders = [order_for(customer, number, 30000, sandbox) for number in ("S-6001", "S-6002")]
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund both")
    server = OpenAIServer(dialect=dialect).start()
    try:
        model = OpenAIChatModel(model="test-model", api_key="sk-test", base_url=server.url, timeout=5.0)
        asked = [("issue_refund", {"order_number": o.number, "amount_cents": 15000}) for o in orders]
        ids = server.enqueue_tool_calls(asked)
        advance(ticket.pk, model=model)
        first, second = refund_calls(ticket)
        assert [first.model_call_id, second.model_call_id] == ids
        assert second.approval_required and "refunds to one customer above" in second.approval_reason
        card = ApprovalRequest.objects.get(tool_call=second)
        approval_services.approval_decide(approval_id=card.pk, user=approver, approve=False, note="No.")
        server.enqueue_text("The first refund is done; the second was declined.")
        advance(ticket.pk, model=model)
    finally:
        server.stop()

    assert [r["amount"] for r in paid(sandbox, orders[0])] == [15000]
    assert paid(sandbox, orders[1]) == []
    assert_money_invariants(sandbox)


def test_a_refund_asked_again_after_staff_approved_one_is_reviewed_again_and_more_than_is_left_is_refused(
    sandbox, approver
):  # noqa: ANN001
    """One turn, one call id: $250.00 on S-7001 (staff approve; paid), $200.00 more in the next step (a
    second refund: reviewed, staff approve it too; paid), then $100.00 where $50.00 is left (refused
    before any card)."""
    customer = make_customer()
    order = order_for(customer, "S-7001", 50000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund S-7001")
    model = Steps(
        [("c1", refund("S-7001", 25000))], [("c1", refund("S-7001", 20000))], [("c1", refund("S-7001", 10000))]
    )

    advance(ticket.pk, model=model)
    for _ in range(2):
        card = ApprovalRequest.objects.get(ticket=ticket, status=ApprovalStatus.PENDING)
        approval_services.approval_decide(approval_id=card.pk, user=approver, approve=True)
        advance(ticket.pk, model=model)

    first, second, third = refund_calls(ticket)
    assert second.approval_required and "already has $250.00 refunded or pending" in second.approval_reason
    assert third.status == CallStatus.FAILED and "$50.00 left to refund" in third.error, third.error
    assert not ApprovalRequest.objects.filter(tool_call=third).exists()
    assert sorted(r["amount"] for r in paid(sandbox, order)) == [20000, 25000]
    assert_money_invariants(sandbox, needed_approval={"S-7001"})
