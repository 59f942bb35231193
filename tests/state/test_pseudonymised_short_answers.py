"""A pseudonymised bundle withholds a customer's short answers wherever they are repeated whole.

Texts shorter than eight characters are not hunted inside other sentences ("ok" would be cut out of
every one), so an answer such as a postcode ("E1 6AN") or a passcode was withheld in its message row
only: the bundle still carried it in the message's timeline event, in each later model request (the
customer's turn), and in the tool calls that quoted it (the offline model searches the help articles
for it). Those copies are the message itself, repeated whole.
"""

from __future__ import annotations

import pytest

from agents.runner import advance
from tests.conftest import make_customer, make_order
from tests.state.conftest import bundle_bytes, export, verify
from tests.state.test_bundle import empty_the_ledger, restore
from tests.tickets.files import png_bytes
from tickets import services as ticket_services
from tickets.attachments import IncomingFile
from tickets.models import Message

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

SHORT_ANSWERS = ("E1 6AN", "4821-9")  # a postcode; a passcode, sent with a photo


def test_a_customers_short_answers_are_withheld_wherever_the_bundle_repeats_them(tmp_path):
    customer = make_customer()
    make_order(customer, number="S-2001")
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Where is my parcel", body="Where is order S-2001? It has not come."
    )
    advance(ticket.pk)
    ticket_services.message_post(ticket=ticket, author_kind="customer", body=SHORT_ANSWERS[0])
    advance(ticket.pk)
    ticket_services.message_post(
        ticket=ticket,
        author_kind="customer",
        body=SHORT_ANSWERS[1],
        files=[IncomingFile(name="label.png", data=png_bytes())],
    )
    advance(ticket.pk)
    agents_words = list(Message.objects.filter(ticket=ticket, author_kind="agent").values_list("body", flat=True))

    path = export(tmp_path, ticket)  # the default: pseudonymised

    data = bundle_bytes(path).decode()
    assert [answer for answer in SHORT_ANSWERS if answer in data] == []
    assert "S-2001" in data  # an order number is not the customer's words
    assert verify(path)[0] == 0
    empty_the_ledger(restart_keys=False)
    restore(path)
    assert verify(path, database=True)[0] == 0
    restored = list(Message.objects.filter(ticket=ticket, author_kind="agent").values_list("body", flat=True))
    assert restored == agents_words
