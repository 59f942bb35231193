"""A customer's confirmation question moved in a pseudonymised bundle: still answered with its button,
and the call's recorded answer is never taken for the customer's words."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.test import Client

from agents.models import CallStatus, ConfirmationDecision, RunStatus, ToolCall
from agents.runner import advance
from state import bundle
from tests.conftest import make_customer, make_order
from tests.state.conftest import export
from tests.state.test_bundle import empty_the_ledger
from tickets import presenters, selectors
from tickets import services as ticket_services
from tickets.models import Ticket

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120), pytest.mark.customer_confirms]


def restore(path) -> str:  # noqa: ANN001
    out = io.StringIO()
    call_command("restore_state", str(path), stdout=out)
    return out.getvalue()


def shown_question(ticket_id: int) -> dict:
    """The Confirm/Cancel card as the customer's chat renders it (what chat.js posts back)."""
    ticket = Ticket.objects.get(pk=ticket_id)
    items, _ = presenters.present_events(selectors.ticket_timeline(ticket=ticket, public_only=True))
    cards = [i for i in items if i.get("kind") == "confirm"]
    assert cards, items
    return cards[-1]


def test_a_question_restored_from_a_pseudonymised_bundle_is_confirmed_with_its_button(tmp_path):
    """The customer's words are taken out of the refund's arguments, so its digest changes: the one
    in the question the chat shows changes with it, and the Confirm the chat sends back is accepted."""
    customer = make_customer("wilhelmina")
    make_order(customer, number="Q-4401", total_cents=4999)
    body = "Please refund order Q-4401, the handle snapped off on the first day"
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund for Q-4401", body=body)
    assert advance(ticket.pk).state == RunStatus.WAITING_CONFIRMATION
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert shown_question(ticket.pk)["digest"] == call.confirmation_digest

    path = export(tmp_path, ticket)  # the default: pseudonymised
    empty_the_ledger()
    restore(path)

    restored = ToolCall.objects.get(pk=call.pk)
    assert restored.status == CallStatus.AWAITING_CONFIRMATION
    assert restored.arguments != call.arguments  # the customer's words were taken out
    card = shown_question(ticket.pk)
    assert card["digest"] == restored.confirmation_digest
    client = Client()
    client.force_login(Ticket.objects.get(pk=ticket.pk).customer.user)
    response = client.post(
        f"/tickets/{ticket.pk}/confirmations/{call.pk}",
        {"answer": "confirm", "digest": card["digest"]},
        content_type="application/json",
    )
    assert response.status_code == 200, response.json()
    assert ToolCall.objects.get(pk=call.pk).confirmation_decision == ConfirmationDecision.CONFIRMED


def test_a_typed_confirmed_leaves_the_calls_recorded_confirmation_as_it_is(tmp_path):
    """A typed "confirmed" is a message like any other: withheld as the customer's words, while the
    call's confirmation and the timeline's decision, spelt the same, are codes and stay; the ticket
    moves with the refund confirmed."""
    customer = make_customer("ottoline")
    make_order(customer, number="Q-4402", total_cents=4999)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund for Q-4402", body="Please refund order Q-4402, it arrived broken"
    )
    assert advance(ticket.pk).state == RunStatus.WAITING_CONFIRMATION
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    client = Client()
    client.force_login(customer.user)
    typed = client.post(
        f"/tickets/{ticket.pk}/messages",
        {"client_msg_id": "typed-1", "body": "confirmed"},
        content_type="application/json",
    )
    assert typed.status_code == 201
    pressed = client.post(
        f"/tickets/{ticket.pk}/confirmations/{call.pk}",
        {"answer": "confirm", "digest": call.confirmation_digest},
        content_type="application/json",
    )
    assert pressed.status_code == 200
    # The confirmed refund is in flight (the worker has not applied the answer yet): the ticket moves.
    path = export(tmp_path, ticket)
    events = bundle.decode_rows((path / "parts" / "tickets.TicketEvent.jsonl").read_bytes())
    decided = [e["payload"] for e in events if e["kind"] == "confirmation_decided"]
    assert [p["decision"] for p in decided] == ["confirmed"]
    messages = bundle.decode_rows((path / "parts" / "tickets.Message.jsonl").read_bytes())
    assert "confirmed" not in [m["body"] for m in messages]
    empty_the_ledger()
    out = restore(path)  # raises CommandError if refused

    restored = ToolCall.objects.get(pk=call.pk)
    assert restored.confirmation_decision == ConfirmationDecision.CONFIRMED, out
