from __future__ import annotations

import pytest

from agents.models import AgentRun, ToolCall
from agents.runner import advance
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services

pytestmark = pytest.mark.django_db(transaction=True)


def test_ticket_page_shows_timeline_runs_and_tool_calls(admin_client):
    customer = make_customer()
    make_order(customer, number="A-9901")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Where", body="Where is A-9901?")
    advance(ticket.pk)
    run = AgentRun.objects.get(ticket=ticket)
    call = ToolCall.objects.get(ticket=ticket)

    page = admin_client.get(f"/admin/tickets/ticket/{ticket.pk}/change/").content.decode()

    assert "timeline" in page.lower()
    assert "agent_run_started" in page and "tool_call_started" in page
    assert call.idempotency_key in page
    assert f"/admin/agents/agentrun/{run.pk}/change/" in page
    run_page = admin_client.get(f"/admin/agents/agentrun/{run.pk}/change/")
    assert run_page.status_code == 200 and "lookup_order" in run_page.content.decode()


def test_staff_can_ring_the_agent_for_a_ticket_from_the_admin(admin_client):
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Hi", body="Hello")

    response = admin_client.post(
        "/admin/tickets/ticket/", {"action": "ring_agent", "_selected_action": [ticket.pk]}, follow=True
    )

    assert "Rang the agent for 1 ticket" in response.content.decode()


def test_staff_hand_a_ticket_back_to_the_agent_and_illegal_moves_are_explained(admin_client):
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Hi", body="I want to talk to a person")
    advance(ticket.pk)
    ticket.refresh_from_db()
    assert ticket.status == "with_human"

    back = admin_client.post(
        "/admin/tickets/ticket/", {"action": "move_to_open", "_selected_action": [ticket.pk]}, follow=True
    )
    closed = admin_client.post(
        "/admin/tickets/ticket/", {"action": "move_to_closed", "_selected_action": [ticket.pk]}, follow=True
    )
    again = admin_client.post(
        "/admin/tickets/ticket/", {"action": "move_to_open", "_selected_action": [ticket.pk]}, follow=True
    )

    assert "1 ticket(s) now open" in back.content.decode()
    assert "1 ticket(s) now closed" in closed.content.decode()
    assert f"Ticket #{ticket.pk} is closed; only a ticket with a person can be handed back" in again.content.decode()
    ticket.refresh_from_db()
    assert ticket.status == "closed"
    assert ticket.events.filter(kind="status_changed", actor_kind="staff").count() == 2


def test_the_failing_tickets_filter_lists_a_parked_ticket_with_its_last_error(admin_client):
    from agents.llm import ModelResponse, ToolCallRequest

    class SaysNonsense:
        name = "nonsense"

        def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
            return ModelResponse(text="", tool_calls=[ToolCallRequest("c" * 150, "list_orders", "{}")])

    parked, _ = ticket_services.ticket_open(customer=make_customer(), subject="Broken", body="Hello?")
    healthy, _ = ticket_services.ticket_open(customer=make_customer(), subject="Fine", body="Hello there")
    for _ in range(3):
        advance(parked.pk, model=SaysNonsense())
    advance(healthy.pk)

    page = admin_client.get("/admin/tickets/ticket/?agent_failing=failing").content.decode()

    assert f"/admin/tickets/ticket/{parked.pk}/change/" in page
    assert f"/admin/tickets/ticket/{healthy.pk}/change/" not in page
    assert "150 characters" in page  # the last error, in its column


def test_the_ticket_list_reads_the_agents_last_errors_with_its_page_not_one_query_per_row(admin_client):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agents.models import RunStatus

    def failed_ticket(n: int) -> int:
        ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject=f"Broken {n}", body="Hello?")
        for attempt in (1, 2):  # the newer run's error is the one shown
            AgentRun.objects.create(
                ticket=ticket, status=RunStatus.FAILED, failures=attempt, last_error=f"error {attempt} of ticket {n}"
            )
        return ticket.pk

    def the_list() -> tuple[int, str]:
        with CaptureQueriesContext(connection) as queries:
            page = admin_client.get("/admin/tickets/ticket/")
        assert page.status_code == 200
        return len(queries.captured_queries), page.content.decode()

    failed_ticket(1)
    few, _ = the_list()
    for n in range(2, 8):
        failed_ticket(n)
    many, page = the_list()

    assert many == few
    for n in range(1, 8):
        assert f"error 2 of ticket {n}" in page and f"error 1 of ticket {n}" not in page
