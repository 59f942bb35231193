"""The model's tool calls hold their arguments as JSON text: a pseudonymised bundle withholds the
customer's words there too, an accent or a quotation mark escaped in it or not."""

from __future__ import annotations

import json

import pytest

from agents.models import RunStatus, ToolCall
from agents.runner import advance
from state import bundle
from tests.conftest import make_customer, make_order
from tests.state.conftest import bundle_bytes, export
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


@pytest.mark.parametrize(
    "words",
    [
        "Please refund order Q-4407, the crème brûlée dish arrived smashed",
        'Please refund order Q-4407, the "deluxe" dish arrived smashed',
    ],
    ids=["an accent", "a quotation mark"],
)
def test_a_pseudonymised_bundle_withholds_the_customers_words_quoted_in_the_models_tool_calls(tmp_path, words):
    customer = make_customer("evadne", flagged=True)
    make_order(customer, number="Q-4407", total_cents=4999).lines.update(description="Crème brûlée dish")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=words)
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.arguments["reason"] == words  # the model quoted the customer

    path = export(tmp_path, ticket)
    data = bundle_bytes(path).decode()
    lines = [line for line in data.splitlines() if "arrived smashed" in line]
    assert lines == [], f"the customer's words are carried in a pseudonymised bundle: {lines[0][:400]}"
    steps = bundle.decode_rows((path / "parts" / "agents.ModelStep.jsonl").read_bytes())
    asked = [json.loads(c["function"]["arguments"]) for s in steps for c in s["tool_calls"] if "function" in c]
    asked += [json.loads(c["arguments"]) for s in steps for c in s["tool_calls"] if "arguments" in c]
    refunds = [a for a in asked if "reason" in a]
    assert refunds, steps
    # Still the JSON of the call's arguments, its order number kept.
    assert all(a["order_number"] == "Q-4407" and "arrived smashed" not in a["reason"] for a in refunds)
