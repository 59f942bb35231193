"""The admin's ticket page shows every row of the ticket's ledger (timeline, messages, runs, tool
calls, refunds, approvals) in a number of queries that does not grow with the ticket: each row that
names a person, an order or a run read that one on its own (one query per row), so a ticket a dozen
people worked on for months took thousands of queries to open."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.llm import ModelResponse, ToolCallRequest
from agents.models import Refund, RefundStatus
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_money_path import order_for
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import AuthorKind, Ticket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


class RefundAsked:
    """A model that asks for one refund when the customer has written, and says it is done after the tool's result."""

    name = "scripted-refund"

    def __init__(self, number: str, cents: int) -> None:
        self.arguments = json.dumps({"order_number": number, "amount_cents": cents})

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        if messages[-1]["role"] == "tool":
            return ModelResponse(text="Done.")
        return ModelResponse(text="", tool_calls=[ToolCallRequest("c1", "issue_refund", self.arguments)])


def a_round_of_work(ticket: Ticket, sandbox, n: int) -> None:  # noqa: ANN001
    """The customer asks for a refund of another order; a new colleague approves it, answers the
    customer, leaves a note and hands the ticket back: rows that name that colleague, the order, the run."""
    colleague = make_support_staff(f"colleague{n}", first_name=f"Colleague{n}")
    number = f"R-{n:03d}"
    order_for(ticket.customer, number, 64900, sandbox)
    services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body=f"Please refund {number}")
    model = RefundAsked(number, 30000)  # above the $200.00 threshold: a staff approval first
    advance(ticket.pk, model=model)
    approval = ApprovalRequest.objects.get(ticket=ticket, status=ApprovalStatus.PENDING)
    approval_services.approval_decide(approval_id=approval.pk, user=colleague, approve=True)
    advance(ticket.pk, model=model)
    services.staff_reply(ticket=ticket, user=colleague, body="Paid back.", client_msg_id=f"reply-{n}")
    services.staff_note(ticket=ticket, user=colleague, body="Checked the card.", client_msg_id=f"note-{n}")
    services.ticket_hand_back(ticket=ticket, user=colleague)


def queries_to_open(admin_client, ticket: Ticket) -> int:  # noqa: ANN001
    admin_client.get(f"/admin/tickets/ticket/{ticket.pk}/change/")  # what is read once per process (content types)
    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get(f"/admin/tickets/ticket/{ticket.pk}/change/")
    assert page.status_code == 200
    return len(queries.captured_queries)


def test_the_ticket_page_opens_in_as_many_queries_after_many_people_worked_on_it(admin_client, sandbox):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = services.ticket_open(customer=customer, subject="Refunds", body="Hello")
    a_round_of_work(ticket, sandbox, 1)
    few = queries_to_open(admin_client, ticket)

    for n in range(2, 7):
        a_round_of_work(ticket, sandbox, n)
    many = queries_to_open(admin_client, ticket)

    assert Refund.objects.filter(ticket=ticket, status=RefundStatus.SUCCEEDED).count() == 6  # the rows are there
    page = admin_client.get(f"/admin/tickets/ticket/{ticket.pk}/change/").content.decode()
    assert "colleague6" in page and "R-006" in page  # and shown
    assert many == few
