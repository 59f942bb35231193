"""A pseudonymised bundle withholds a customer's words that the model quoted only in part.

The model's tool calls may quote the customer cut short: the offline model searches the help articles
for the first 200 characters of what the customer wrote, and hands a ticket off with the first 400 as
its reason, which its internal note repeats ("Handed off to a person: ..."). Only whole messages were
hunted, so those first characters were carried as they were.
"""

from __future__ import annotations

import pytest

from agents.models import ToolCall
from agents.runner import advance
from tests.conftest import make_customer
from tests.state.conftest import bundle_bytes, export, verify
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

LONG_MESSAGE = (
    "My neighbour at 14 Larkspur Lane, phone 07700 900123, says the kettle I bought smells odd when hot. "
    + "It is quite strange and I would like some advice about what I should do with it. " * 3
)


def test_the_customers_words_quoted_cut_short_in_a_tool_call_are_withheld(tmp_path):
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Delivery", body=LONG_MESSAGE)
    advance(ticket.pk)
    quoted = [c.arguments for c in ToolCall.objects.filter(ticket=ticket)]
    assert any("Larkspur" in str(arguments) for arguments in quoted), quoted  # the model quoted the start

    path = export(tmp_path, ticket)

    data = bundle_bytes(path).decode()
    assert [words for words in ("Larkspur", "07700 900123", "quite strange") if words in data] == []
    assert verify(path)[0] == 0


def test_the_customers_words_cut_short_as_a_hand_offs_reason_are_withheld_in_its_note(tmp_path):
    customer = make_customer()
    body = "I would like to speak to a person. " + LONG_MESSAGE * 2
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Delivery", body=body)
    advance(ticket.pk)
    reason = ToolCall.objects.get(ticket=ticket, name="hand_off_to_human").arguments["reason"]
    assert "Larkspur" in reason and reason in body and len(reason) < len(body.strip())  # the start, quoted

    path = export(tmp_path, ticket)

    data = bundle_bytes(path).decode()
    assert [words for words in ("Larkspur", "07700 900123", "quite strange") if words in data] == []
    assert "Handed off to a person: [withheld: the customer's words]" in data
    assert verify(path)[0] == 0
