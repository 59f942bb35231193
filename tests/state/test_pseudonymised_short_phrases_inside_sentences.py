"""A pseudonymised bundle withholds a customer's short details wherever they are repeated, inside other
sentences too.

A phrase under eight characters was hunted only where a value was that phrase whole ("ok" would be cut
out of every sentence): a passcode, a postcode or a flat number the customer wrote inside a sentence
("my code is 4821-9 thanks") stayed wherever the model, the agent or a person repeated it in words of
their own: the agent's reply, the model's tool call arguments and its requests, a person's note, and
the timeline events quoting each of them. What carries a digit is no common word: it is hunted there,
but for the bundle's order numbers, which the money rules read back.
"""

from __future__ import annotations

import json
import re

import pytest

from agents.llm_openai import OpenAIChatModel
from agents.models import ToolCall
from agents.runner import advance
from tests.agents.openai_server import OpenAIServer
from tests.conftest import make_customer, make_order
from tests.staff.conftest import make_support_staff
from tests.state.conftest import bundle_bytes, export, verify
from tests.state.test_bundle import empty_the_ledger, restore
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

# A passcode, a postcode (two short pieces), a flat number, a phone number: each under eight characters.
DETAILS = ("4821-9", "E1", "6AN", "3B", "900123")


def test_a_customers_short_details_written_inside_sentences_are_withheld_where_others_repeat_them(tmp_path):
    customer = make_customer()
    make_order(customer, number="S-2001")
    ticket, _ = ticket_services.ticket_open(
        customer=customer,
        subject="Parcel S-2001",
        body="Hello, my door code is 4821-9 thanks, I'm at E1 6AN, flat 3B, phone 07700 900123. Order S-2001.",
    )
    server = OpenAIServer().start()
    try:
        server.enqueue_tool_calls([("search_help", {"query": "door code 4821-9"})])
        server.enqueue_tool_calls([("lookup_order", {"order_number": "S-2001"})])
        server.enqueue_text("Thanks! I noted code 4821-9 for flat 3B at E1 6AN; order S-2001 is on its way.")
        model = OpenAIChatModel(model="gpt-test", api_key="k", base_url=server.url, max_retries=0, timeout=10)
        advance(ticket.pk, model=model)
    finally:
        server.stop()
    ticket_services.staff_note(
        ticket=ticket.pk, user=make_support_staff("maria"), body="Courier: use 4821-9, ring 900123", client_msg_id="n1"
    )
    assert ToolCall.objects.filter(ticket=ticket, name="lookup_order", arguments__order_number="S-2001").exists()

    path = export(tmp_path, ticket)  # the default: pseudonymised

    data = bundle_bytes(path).decode()
    left = [detail for detail in DETAILS if re.search(rf"(?<![\w-]){re.escape(detail)}(?![\w-])", data, re.I)]
    assert left == [], f"the customer's details {left} are carried in a pseudonymised bundle"
    calls = [json.loads(line) for line in (path / "parts" / "agents.ToolCall.jsonl").read_text().splitlines()]
    assert {"order_number": "S-2001"} in [call["arguments"] for call in calls]  # the money rules find it by it
    assert "order S-2001 is on its way" in data  # an order number is not the customer's words
    assert verify(path)[0] == 0
    empty_the_ledger(restart_keys=False)
    restore(path)
    assert verify(path, database=True)[0] == 0


def test_a_short_name_is_pseudonymised_where_the_agent_greets_the_customer_by_it(tmp_path):
    customer = make_customer("bo")
    customer.name = "Bo Li"
    customer.save()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Hello there", body="Where is my parcel?")
    server = OpenAIServer().start()
    try:
        server.enqueue_text("Hi Bo, I am sorry Li: could you give me the order number?")
        model = OpenAIChatModel(model="gpt-test", api_key="k", base_url=server.url, max_retries=0, timeout=10)
        advance(ticket.pk, model=model)
    finally:
        server.stop()

    data = bundle_bytes(export(tmp_path, ticket)).decode()

    assert [name for name in ("Bo", "Li") if re.search(rf"\b{name}\b", data)] == []


def test_an_address_the_customer_wrote_inside_a_sentence_is_withheld_where_the_agent_repeats_it(tmp_path):
    """Not their registered address (that one is pseudonymised by the customer's row): one they typed."""
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Contact", body="Please write to jo.bloggs@mail.example instead, not my old one."
    )
    server = OpenAIServer().start()
    try:
        server.enqueue_text("Of course: I will write to jo.bloggs@mail.example from now on.")
        model = OpenAIChatModel(model="gpt-test", api_key="k", base_url=server.url, max_retries=0, timeout=10)
        advance(ticket.pk, model=model)
    finally:
        server.stop()

    data = bundle_bytes(export(tmp_path, ticket)).decode()

    assert "jo.bloggs" not in data.lower()
