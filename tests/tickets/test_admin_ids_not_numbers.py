"""An id in an admin form or bulk action that is not a number (a garbled or hand-made request) is
the form again with its error, or a 400, never a 500: the autocomplete fields (a ticket's assignee,
an order's customer) looked the value up to show the form again (ValueError), and a bulk action's
selection went into its query as it came (on Django's own lists too: users, groups, lockouts)."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.conftest import make_order
from tickets import services
from tickets.models import Order, Ticket, TicketStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def adm(admin_user) -> Client:  # noqa: ANN001
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)
    return client


@pytest.fixture
def ticket(customer) -> Ticket:  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is it?")
    return ticket


@pytest.mark.parametrize("assignee", ["abc", "1.5", str(2**64)])
def test_a_ticket_saved_with_an_assignee_that_is_not_an_id_is_the_form_again(adm: Client, ticket: Ticket, assignee):  # noqa: ANN001
    response = adm.post(
        f"/admin/tickets/ticket/{ticket.pk}/change/", {"subject": "Kettle", "priority": "normal", "assignee": assignee}
    )
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert Ticket.objects.get(pk=ticket.pk).assignee_id is None


def test_an_order_saved_with_a_customer_that_is_not_an_id_is_the_form_again(adm: Client, customer):  # noqa: ANN001
    order = make_order(customer)
    response = adm.post(
        f"/admin/tickets/order/{order.pk}/change/",
        {"number": order.number, "customer": "abc", "status": order.status, "currency": "usd",
         "total_cents": order.total_cents, "payment_reference": order.payment_reference,
         "placed_at_0": "2026-01-01", "placed_at_1": "10:00:00",
         "lines-TOTAL_FORMS": "0", "lines-INITIAL_FORMS": "0"},
    )  # fmt: skip
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert Order.objects.get(pk=order.pk).customer_id == customer.pk


@pytest.mark.parametrize(
    ("changelist", "action"),
    [
        ("/admin/tickets/ticket/", "move_to_with_human"),
        ("/admin/tickets/ticket/", "delete_selected"),
        ("/admin/tickets/customer/", "review_every_refund"),
        ("/admin/agents/refund/", "reconcile_refunds"),
        ("/admin/auth/user/", "delete_selected"),  # Django's own lists too
        ("/admin/auth/group/", "delete_selected"),
        ("/admin/axes/accessattempt/", "delete_selected"),
        ("/admin/agents/agentrun/", "move_runs_to_active"),  # a list whose page is a function of its own
    ],
)
def test_a_bulk_action_on_a_selection_that_is_not_ids_is_refused(adm: Client, ticket: Ticket, changelist, action):  # noqa: ANN001
    response = adm.post(changelist, {"action": action, "_selected_action": [str(ticket.pk), "abc"]})
    assert response.status_code == 400
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.OPEN


def test_cleaning_up_expired_lockouts_from_the_admin_list_is_done_not_a_500(adm: Client, settings):  # noqa: ANN001
    """django-axes' own action read the time of a sign-in attempt from the request, which only a sign-in
    sets: every use of it from the lockout list was a 500."""
    from axes.models import AccessAttempt

    settings.AXES_COOLOFF_TIME = 1  # hours
    attempt = AccessAttempt.objects.create(username="victim", ip_address="203.0.113.9", failures_since_start=5,
                                           get_data="", post_data="", user_agent="", path_info="/accounts/login/",
                                           http_accept="")  # fmt: skip
    AccessAttempt.objects.filter(pk=attempt.pk).update(attempt_time="2020-01-01T00:00:00Z")

    response = adm.post(
        "/admin/axes/accessattempt/", {"action": "cleanup_expired_attempts", "_selected_action": [attempt.pk]}
    )

    assert response.status_code == 302, response.content[:300]
    assert not AccessAttempt.objects.filter(pk=attempt.pk).exists()
