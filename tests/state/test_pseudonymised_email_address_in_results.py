"""A pseudonymised bundle carries no customer's email address in the email tool's results.

The email tool records where it sent the email (``{"sent": true, "to": <address>}``). "to" was read
as a code at the top of every JSON value (it is one in a status change's event), so the address was
kept, in the call's result and in every later model request that quotes it; and an address a person
has corrected since is known only there.
"""

from __future__ import annotations

import pytest

from agents.models import ToolCall
from agents.runner import advance
from tests.agents.test_tool_writes_are_fenced import AsksFor
from tests.conftest import make_customer
from tests.state.conftest import bundle_bytes, export, verify
from tickets import services as ticket_services
from tickets.models import Customer, TicketEvent

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def test_the_address_the_email_tool_sent_to_is_pseudonymised_and_status_changes_are_kept(tmp_path, mailoutbox):
    customer = make_customer("dorothea")
    Customer.objects.filter(pk=customer.pk).update(email="dq.home@mail.example")
    customer.refresh_from_db()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Help", body="Email me the details, please.")
    model = AsksFor("notify_customer_by_email", {"subject": "Your request", "body": "Here are the details."})
    advance(ticket.pk, model=model)
    assert ToolCall.objects.get(ticket=ticket).result["to"] == "dq.home@mail.example"
    Customer.objects.filter(pk=customer.pk).update(email="dq.work@mail.example")  # corrected since
    statuses = [e.payload for e in TicketEvent.objects.filter(ticket=ticket, kind="status_changed")]

    path = export(tmp_path, ticket)

    data = bundle_bytes(path).decode()
    assert [address for address in ("dq.home", "dq.work", "mail.example") if address in data] == []
    assert f"customer-{customer.pk}@pseudonymised.invalid" in data
    assert statuses and all(f'"from":"{s["from"]}"' in data and f'"to":"{s["to"]}"' in data for s in statuses)
    assert verify(path)[0] == 0
