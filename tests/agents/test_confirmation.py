"""The customer confirms before money moves: a refund is paid only after the customer pressed
Confirm in the chat, for exactly the amount they were shown, once; never after Cancel, never
after the question expired, and never on a typed "yes". Every test compares the payment
sandbox's own records (a separate process, over HTTP) with the ledger."""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from agents.approval import may_execute
from agents.confirmation import confirmations_expire_due
from agents.conversation import request_of
from agents.models import (
    AgentRun,
    ApprovalPolicy,
    CallStatus,
    ConfirmationDecision,
    ModelStep,
    Refund,
    RunStatus,
    ToolCall,
)
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.test_money_path import assert_money_invariants, order_for, paid, public_words, write
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tests.workers import wait_until
from tickets import presenters, selectors
from tickets import services as ticket_services
from tickets.models import Ticket, TicketStatus

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.customer_confirms,
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def ask_for_refund(sandbox, number: str = "A-7001", total: int = 4999):  # noqa: ANN001, ANN201
    alice = make_customer()
    order = order_for(alice, number, total, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=alice, subject="Refund", body=f"Please refund order {number}")
    advance(ticket.pk)
    return alice, order, ticket


def question(ticket: Ticket) -> ToolCall:
    return ToolCall.objects.get(ticket=ticket, name="issue_refund")


def answer(client: Client, ticket: Ticket, call: ToolCall, what: str, digest: str | None = None):  # noqa: ANN201
    return client.post(
        f"/tickets/{ticket.pk}/confirmations/{call.pk}",
        {"answer": what, "digest": call.confirmation_digest if digest is None else digest},
        content_type="application/json",
    )


def signed_in(customer) -> Client:  # noqa: ANN001
    client = Client()
    client.force_login(customer.user)
    return client


def test_a_refund_waits_for_the_customer_and_is_paid_once_after_confirm(sandbox):  # noqa: ANN001
    alice, order, ticket = ask_for_refund(sandbox)

    call = question(ticket)
    assert call.status == CallStatus.AWAITING_CONFIRMATION and paid(sandbox, order) == []
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.WAITING_CONFIRMATION
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WAITING_ON_CUSTOMER
    # The customer sees the question, with the exact amount, in the chat.
    items, _ = presenters.present_events(selectors.ticket_timeline(ticket=ticket, public_only=True))
    asked = [i for i in items if i["kind"] == "confirm"]
    assert [i["text"] for i in asked] == ["Refund $49.99 to the card used for order A-7001?"]
    assert asked[0]["call_id"] == call.pk

    response = answer(signed_in(alice), ticket, call, "confirm")
    assert response.status_code == 200 and response.json() == {"decision": "confirmed", "text": "You confirmed."}
    advance(ticket.pk)

    assert [r["amount"] for r in paid(sandbox, order)] == [4999]
    assert question(ticket).status == CallStatus.SUCCEEDED
    assert any("refunded $49.99" in w for w in public_words(ticket)), public_words(ticket)
    # The resumed run told the model each call's result once, right after the call.
    last = ModelStep.objects.filter(ticket=ticket).order_by("-run_id", "-index").first()
    request = request_of(last)
    results = [m["tool_call_id"] for m in request if m["role"] == "tool"]
    assert len(results) == len(set(results)) == 2, request
    asked = [c["id"] for m in request if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert results == asked
    assert_money_invariants(sandbox)


def test_cancel_pays_nothing_and_the_agent_says_so(sandbox):  # noqa: ANN001
    alice, order, ticket = ask_for_refund(sandbox)
    call = question(ticket)

    assert answer(signed_in(alice), ticket, call, "cancel").json() == {
        "decision": "cancelled",
        "text": "You cancelled; nothing was done.",
    }
    advance(ticket.pk)

    assert paid(sandbox, order) == [] and not Refund.objects.exists()
    assert question(ticket).status == CallStatus.CANCELLED
    assert any("have not refunded anything on order A-7001" in w for w in public_words(ticket))
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.COMPLETED


def test_an_unanswered_question_expires_pays_nothing_and_tells_the_customer(sandbox):  # noqa: ANN001
    alice, order, ticket = ask_for_refund(sandbox)
    call = question(ticket)
    assert confirmations_expire_due() == 0  # not due yet
    ToolCall.objects.filter(pk=call.pk).update(confirmation_expires_at=timezone.now() - timedelta(seconds=1))

    assert confirmations_expire_due() == 1
    advance(ticket.pk)

    assert paid(sandbox, order) == [] and not Refund.objects.exists()
    call.refresh_from_db()
    assert call.status == CallStatus.CANCELLED and call.confirmation_decision == ConfirmationDecision.EXPIRED
    assert any("did not confirm in time, so nothing was done" in w for w in public_words(ticket))
    # Too late now: the button is refused and nothing changes.
    late = answer(signed_in(alice), ticket, call, "confirm")
    assert late.status_code == 409 and "expired" in late.json()["error"]
    advance(ticket.pk)
    assert paid(sandbox, order) == []


def test_a_typed_yes_is_not_a_confirmation(sandbox):  # noqa: ANN001
    alice, order, ticket = ask_for_refund(sandbox)
    write(ticket, "yes, confirm the refund")
    advance(ticket.pk)
    advance(ticket.pk)

    assert paid(sandbox, order) == []
    assert question(ticket).status == CallStatus.AWAITING_CONFIRMATION
    assert any("answer the question above with Confirm or Cancel" in w for w in public_words(ticket))
    # The button still works; the typed message is answered after it.
    answer(signed_in(alice), ticket, question(ticket), "confirm")
    advance(ticket.pk)
    assert [r["amount"] for r in paid(sandbox, order)] == [4999]
    assert not selectors.unanswered_messages(ticket_id=ticket.pk).exists()
    assert_money_invariants(sandbox)


def test_a_double_click_and_a_second_tab_confirm_once(sandbox):  # noqa: ANN001
    alice, order, ticket = ask_for_refund(sandbox)
    call = question(ticket)
    first, second = signed_in(alice), signed_in(alice)

    assert answer(first, ticket, call, "confirm").status_code == 200
    assert answer(first, ticket, call, "confirm").status_code == 200  # the same answer again: no change
    changed = answer(second, ticket, call, "cancel")  # another tab, the other button
    assert changed.status_code == 409 and "already confirmed" in changed.json()["error"]
    assert ticket.events.filter(kind="confirmation_decided").count() == 1
    advance(ticket.pk)
    advance(ticket.pk)

    assert [r["amount"] for r in paid(sandbox, order)] == [4999]
    assert_money_invariants(sandbox)


def test_the_answer_is_bound_to_the_amount_shown(sandbox):  # noqa: ANN001
    alice, order, ticket = ask_for_refund(sandbox)
    call = question(ticket)

    refused = answer(signed_in(alice), ticket, call, "confirm", digest="0" * 64)
    assert refused.status_code == 409 and "changed" in refused.json()["error"]
    call.refresh_from_db()
    assert call.confirmation_decision is None
    # A confirmation recorded on other arguments does not open the door.
    ToolCall.objects.filter(pk=call.pk).update(confirmation_decision=ConfirmationDecision.CONFIRMED,
                                               confirmation_digest="f" * 64)  # fmt: skip
    call.refresh_from_db()
    assert not may_execute(call)
    advance(ticket.pk)
    assert paid(sandbox, order) == []


def test_an_answer_from_another_login_says_so_with_a_sign_in_link_and_pays_nothing(sandbox):  # noqa: ANN001
    """Another customer signed in on a shared browser while the question was on screen: the card was told
    by a bare 404 page ("Not sent: the server answered 404"); it is told why, with a way to sign in."""
    alice, order, ticket = ask_for_refund(sandbox)
    call = question(ticket)

    refused = answer(signed_in(make_customer()), ticket, call, "confirm")

    assert refused.status_code == 404
    assert refused.json() == {
        "error": "This question is not open to the account signed in on this browser now, so nothing was done.",
        "code": "not_this_account",
        "login_url": f"/accounts/login/?next=/tickets/{ticket.pk}/",
    }
    call.refresh_from_db()
    assert call.confirmation_decision is None
    advance(ticket.pk)
    assert paid(sandbox, order) == []


def test_only_the_tickets_customer_can_answer(sandbox):  # noqa: ANN001
    alice, order, ticket = ask_for_refund(sandbox)
    call = question(ticket)
    intruder = make_customer()

    assert answer(signed_in(intruder), ticket, call, "confirm").status_code == 404
    assert answer(Client(), ticket, call, "confirm").status_code == 401  # signed out: nothing is done
    bad = signed_in(alice).post(
        f"/tickets/{ticket.pk}/confirmations/{call.pk}", {"answer": "yes please"}, content_type="application/json"
    )
    assert bad.status_code == 400
    assert signed_in(alice).get(f"/tickets/{ticket.pk}/confirmations/{call.pk}").status_code == 405
    call.refresh_from_db()
    assert call.confirmation_decision is None and paid(sandbox, order) == []


def test_after_a_staff_approval_the_customer_still_confirms(sandbox):  # noqa: ANN001
    bob = make_customer(flagged=True)  # every refund for bob is reviewed by staff
    order = order_for(bob, "B-7002", 64900, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=bob, subject="Refund", body="Please refund order B-7002")
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    staff = make_staff("confirm-approver", can_decide=True)
    approval_services.approval_decide(approval_id=approval.pk, user=staff, approve=True)
    advance(ticket.pk)

    call = question(ticket)
    assert call.status == CallStatus.AWAITING_CONFIRMATION and paid(sandbox, order) == []
    assert call.confirmation_text == "Refund $649.00 to the card used for order B-7002?"
    answer(signed_in(bob), ticket, call, "confirm")
    advance(ticket.pk)

    assert [r["amount"] for r in paid(sandbox, order)] == [64900]
    assert_money_invariants(sandbox, needed_approval={"B-7002"})


def test_the_policy_can_turn_the_question_off(sandbox):  # noqa: ANN001
    ApprovalPolicy.objects.update_or_create(pk=1, defaults={"customer_confirms_refunds": False})
    alice, order, ticket = ask_for_refund(sandbox)

    assert question(ticket).status == CallStatus.SUCCEEDED
    assert [r["amount"] for r in paid(sandbox, order)] == [4999]
    assert not ticket.events.filter(kind="confirmation_requested").exists()


def test_a_page_loaded_after_the_answer_shows_no_buttons(sandbox):  # noqa: ANN001
    alice, order, ticket = ask_for_refund(sandbox)
    client = signed_in(alice)
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    assert 'data-answer="confirm">Confirm</button>' in page
    answer(client, ticket, question(ticket), "cancel")
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    assert 'data-answer="confirm" disabled hidden>Confirm</button>' in page


@pytest.mark.workers
def test_a_worker_killed_right_after_paying_a_confirmed_refund_pays_it_once(sandbox, cluster):  # noqa: ANN001
    alice = make_customer()
    order = order_for(alice, "A-7009", 4999, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=alice, subject="Refund", body="Please refund order A-7009")
    doomed = cluster.worker(faults="after_keyed_effect", REFUND_CUSTOMER_CONFIRMATION="1")
    wait_until(
        lambda: ToolCall.objects.filter(ticket=ticket, status=CallStatus.AWAITING_CONFIRMATION).exists(),
        timeout=60, what="the question", cluster=cluster,
    )  # fmt: skip
    assert paid(sandbox, order) == []
    call = question(ticket)
    assert answer(signed_in(alice), ticket, call, "confirm").status_code == 200

    doomed.wait_dead(timeout=60)
    assert doomed.popen.returncode == -signal.SIGKILL, doomed.log()
    cluster.worker(REFUND_CUSTOMER_CONFIRMATION="1")
    cluster.beat()
    wait_until(
        lambda: question(ticket).status == CallStatus.SUCCEEDED
        and AgentRun.objects.get(ticket=ticket).status == RunStatus.COMPLETED,
        timeout=60, what="the refund to be settled", cluster=cluster,
    )  # fmt: skip
    assert [r["amount"] for r in paid(sandbox, order)] == [4999]
    assert_money_invariants(sandbox)
