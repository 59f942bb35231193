"""The admin for operations, over HTTP: a read-only timeline, search, money, times and the ticket buttons."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.test import Client, RequestFactory
from django.urls import reverse

from agents import tasks as agent_tasks
from agents.models import AgentRun, ModelStep, Refund, TicketLease, ToolCall
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.approvals.test_approvals import refund_ticket
from tests.conftest import make_customer, make_order
from tickets import services
from tickets.models import ActorKind, Customer, Ticket, TicketEvent, TicketStatus
from tickets.signals import ticket_needs_agent

pytestmark = pytest.mark.django_db


def open_ticket(customer: Customer | None = None, subject: str = "Kettle") -> Ticket:
    ticket, _ = services.ticket_open(customer=customer or make_customer(), subject=subject, body="Where is it?")
    return ticket


def change_url(ticket: Ticket) -> str:
    return f"/admin/tickets/ticket/{ticket.pk}/change/"


def button_url(ticket: Ticket, slug: str) -> str:
    return f"/admin/tickets/ticket/{ticket.pk}/{slug}/"


def found(client: Client, query: str) -> set[int]:
    response = client.get("/admin/tickets/ticket/", {"q": query})
    assert response.status_code == 200
    return {ticket.pk for ticket in response.context["cl"].result_list}


def text_of(response) -> str:  # noqa: ANN001
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))


def staff_changes(ticket: Ticket) -> list[tuple[str, str, int | None]]:
    events = ticket.events.filter(kind="status_changed", actor_kind=ActorKind.STAFF).order_by("seq")
    return [(event.payload["from"], event.payload["to"], event.actor_user_id) for event in events]


@pytest.fixture
def admin_ticket(admin_user) -> Ticket:  # noqa: ANN001
    return open_ticket()


@pytest.fixture
def rings(monkeypatch):  # noqa: ANN001, ANN201
    """Doorbell signals sent, and agent turns actually enqueued (each one a ring of the agent)."""
    signals: list[int] = []
    enqueued: list[int] = []

    def count(sender: object, ticket_id: int, **kwargs: object) -> None:
        signals.append(ticket_id)

    monkeypatch.setattr(
        agent_tasks.advance_ticket, "apply_async", lambda args, **kwargs: enqueued.append(args[0])
    )  # fmt: skip
    ticket_needs_agent.connect(count, dispatch_uid="test-admin-doorbell-counter")
    yield signals, enqueued
    ticket_needs_agent.disconnect(dispatch_uid="test-admin-doorbell-counter")


# --- The timeline is read-only ----------------------------------------------------------


def test_a_timeline_event_cannot_be_added_in_the_admin(admin_client, admin_ticket):
    before = TicketEvent.objects.count()

    assert admin_client.get("/admin/tickets/ticketevent/add/").status_code == 403
    assert admin_client.post("/admin/tickets/ticketevent/add/", {"ticket": admin_ticket.pk}).status_code == 403
    assert TicketEvent.objects.count() == before
    assert "/admin/tickets/ticketevent/add/" not in admin_client.get("/admin/tickets/ticketevent/").content.decode()


def test_a_timeline_event_page_is_read_only_and_a_save_is_refused(admin_client, admin_ticket):
    event = admin_ticket.events.get(kind="ticket_opened")
    url = f"/admin/tickets/ticketevent/{event.pk}/change/"

    page = admin_client.get(url)
    saved = admin_client.post(url, {"ticket": admin_ticket.pk, "seq": 1, "kind": "forged", "actor_kind": "staff"})

    assert page.status_code == 200 and "ticket_opened" in page.content.decode()
    assert 'name="kind"' not in page.content.decode() and 'name="_save"' not in page.content.decode()
    assert saved.status_code == 403
    assert TicketEvent.objects.get(pk=event.pk).kind == "ticket_opened"


def test_a_timeline_event_cannot_be_deleted_one_by_one_or_in_bulk(admin_client, admin_ticket):
    event = admin_ticket.events.get(kind="ticket_opened")
    url = f"/admin/tickets/ticketevent/{event.pk}/delete/"

    assert admin_client.get(url).status_code == 403
    assert admin_client.post(url, {"post": "yes"}).status_code == 403
    admin_client.post(
        "/admin/tickets/ticketevent/", {"action": "delete_selected", "_selected_action": [event.pk], "post": "yes"}
    )
    assert TicketEvent.objects.filter(pk=event.pk).exists()


def test_the_timeline_on_the_ticket_page_offers_no_add_change_or_delete(admin_client, admin_ticket):
    page = admin_client.get(change_url(admin_ticket)).content.decode()

    assert "ticket_opened" in page  # the timeline is shown ...
    assert 'name="events-0-kind"' not in page  # ... as text, not inputs
    assert 'name="events-0-DELETE"' not in page
    assert "Add another timeline event" not in page


def test_a_save_of_the_ticket_page_leaves_the_timeline_as_it_was(admin_client, admin_ticket):
    event = admin_ticket.events.get(kind="ticket_opened")
    admin_client.post(
        change_url(admin_ticket),
        {
            "subject": "Kettle",
            "customer": admin_ticket.customer_id,
            "priority": "normal",
            "events-TOTAL_FORMS": "1",
            "events-INITIAL_FORMS": "1",
            "events-0-id": event.pk,
            "events-0-kind": "forged",
            "events-0-DELETE": "on",
        },
    )

    assert TicketEvent.objects.get(pk=event.pk).kind == "ticket_opened"


def test_tickets_are_not_added_through_the_admin(admin_client):
    before = Ticket.objects.count()

    assert admin_client.get("/admin/tickets/ticket/add/").status_code == 403
    assert admin_client.post("/admin/tickets/ticket/add/", {"subject": "typed in"}).status_code == 403
    assert Ticket.objects.count() == before
    assert "/admin/tickets/ticket/add/" not in admin_client.get("/admin/tickets/ticket/").content.decode()


@pytest.mark.parametrize("model", [AgentRun, ModelStep, ToolCall, TicketLease, Refund, TicketEvent])
def test_the_agent_ledger_admins_are_read_only(admin_user, model):  # noqa: ANN001
    request = RequestFactory().get("/admin/")
    request.user = admin_user
    model_admin = admin.site._registry[model]

    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request)
    assert not model_admin.has_delete_permission(request)


def test_the_ledger_inlines_on_the_ticket_page_are_read_only(admin_user):
    request = RequestFactory().get("/admin/")
    request.user = admin_user
    ticket_admin = admin.site._registry[Ticket]
    ledger = {"Message", "TicketEvent", "AgentRun", "ToolCall", "Refund"}

    inlines = [inline for inline in ticket_admin.get_inline_instances(request) if inline.model.__name__ in ledger]

    assert {inline.model.__name__ for inline in inlines} == ledger
    for inline in inlines:
        assert not inline.has_add_permission(request, None), inline
        assert not inline.has_change_permission(request), inline
        assert not inline.has_delete_permission(request), inline


# --- Search -------------------------------------------------------------------------------


def test_a_ticket_number_finds_that_ticket_only(admin_client):
    wanted = open_ticket()
    # Without the exact match on ids, a number would also match this customer's email and order.
    lookalike = open_ticket(make_customer(f"buyer{wanted.pk}"))
    make_order(lookalike.customer, number=f"X-{wanted.pk}0")

    assert found(admin_client, str(wanted.pk)) == {wanted.pk}
    assert found(admin_client, f"#{wanted.pk}") == {wanted.pk}
    assert found(admin_client, str(wanted.pk + 100_000)) == set()
    assert found(admin_client, "9" * 40) == set()  # more digits than an id has: no error, no match


def test_an_order_number_finds_the_tickets_of_its_customer(admin_client):
    alice, bob = make_customer("alice"), make_customer("bob")
    make_order(alice, number="A-9901")
    make_order(bob, number="B-1234")
    first, second, bobs = open_ticket(alice), open_ticket(alice, "Again"), open_ticket(bob)

    assert found(admin_client, "A-9901") == {first.pk, second.pk}
    assert found(admin_client, "B-1234") == {bobs.pk}


def test_an_all_digit_order_number_finds_its_customers_ticket(admin_client):
    customer = make_customer()
    make_order(customer, number="7700123")
    ticket, other = open_ticket(customer), open_ticket()

    assert found(admin_client, "7700123") == {ticket.pk}
    assert other.pk not in found(admin_client, "7700123")


def test_a_customers_email_or_name_or_the_subject_finds_their_tickets(admin_client):
    carol, dave = make_customer("carol"), make_customer("dave")
    carols, daves = open_ticket(carol), open_ticket(dave, "Broken toaster")

    assert found(admin_client, "carol@example.test") == {carols.pk}
    assert found(admin_client, "Dave") == {daves.pk}
    assert found(admin_client, "toaster") == {daves.pk}


# --- Money and times -----------------------------------------------------------------------


def test_orders_show_their_total_and_line_prices_as_money(admin_client):
    order = make_order(make_customer(), total_cents=64900, number="M-649")

    listing = admin_client.get("/admin/tickets/order/", {"q": "M-649"}).content.decode()
    page = admin_client.get(f"/admin/tickets/order/{order.pk}/change/").content.decode()

    assert "$649.00" in listing and ">64900<" not in listing and "total cents" not in listing.lower()
    assert page.count("$649.00") == 2  # the total, and the line's unit price


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
def test_approvals_and_refunds_show_amounts_as_money(sandbox, admin_client, admin_user):  # noqa: ANN001
    ticket, _ = refund_ticket(sandbox, number="M-1001")
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)

    approval_list = admin_client.get("/admin/approvals/approvalrequest/").content.decode()
    approval_page = admin_client.get(f"/admin/approvals/approvalrequest/{approval.pk}/change/").content.decode()
    approval_services.approval_decide(approval_id=approval.pk, user=admin_user, approve=True)
    advance(ticket.pk)
    refund = Refund.objects.get(ticket=ticket)
    refund_list = admin_client.get("/admin/agents/refund/").content.decode()
    refund_page = admin_client.get(f"/admin/agents/refund/{refund.pk}/change/").content.decode()
    ticket_page = admin_client.get(change_url(ticket)).content.decode()

    assert "$649.00" in approval_list and "$649.00" in approval_page
    assert "$649.00" in refund_list and "$649.00" in refund_page
    assert ticket_page.count("$649.00") >= 2  # the approval and the refund inlines
    for page in (approval_list, approval_page, refund_list, refund_page, ticket_page):
        # No raw cents column or field (the tool arguments, shown as JSON, keep theirs).
        assert "amount cents" not in page.lower() and ">64900<" not in page


def test_ticket_times_are_shown_to_the_second(admin_client, admin_ticket):
    Ticket.objects.filter(pk=admin_ticket.pk).update(updated_at=datetime(2026, 3, 4, 13, 5, 9, tzinfo=UTC))
    TicketEvent.objects.filter(ticket=admin_ticket).update(created_at=datetime(2026, 3, 4, 13, 5, 7, tzinfo=UTC))

    listing = text_of(admin_client.get("/admin/tickets/ticket/"))
    page = text_of(admin_client.get(change_url(admin_ticket)))

    assert "March 4, 2026, 13:05:09" in listing
    assert "March 4, 2026, 13:05:09" in page  # updated at
    assert "March 4, 2026, 13:05:07" in page  # the timeline


# --- The buttons on the ticket page ---------------------------------------------------------


def test_an_open_ticket_offers_take_over_resolve_and_close(admin_client, admin_ticket):
    page = admin_client.get(change_url(admin_ticket)).content.decode()

    for slug in ("take-over", "resolve", "close"):
        assert f'action="{button_url(admin_ticket, slug)}"' in page
    assert button_url(admin_ticket, "hand-back") not in page


def test_a_ticket_i_have_offers_hand_back_resolve_and_close(admin_client, admin_user, admin_ticket):
    services.ticket_take_over(ticket=admin_ticket, user=admin_user)

    page = admin_client.get(change_url(admin_ticket)).content.decode()

    for slug in ("hand-back", "resolve", "close"):
        assert f'action="{button_url(admin_ticket, slug)}"' in page
    assert button_url(admin_ticket, "take-over") not in page


def test_a_ticket_the_agent_handed_to_a_person_offers_take_over_and_hand_back(admin_client, admin_ticket):
    services.ticket_hand_to_person(ticket=admin_ticket, reason="asked for a person")

    page = admin_client.get(change_url(admin_ticket)).content.decode()

    for slug in ("take-over", "hand-back", "resolve", "close"):
        assert f'action="{button_url(admin_ticket, slug)}"' in page


def test_a_closed_ticket_offers_no_buttons(admin_client, admin_user, admin_ticket):
    services.ticket_close(ticket=admin_ticket, user=admin_user)

    page = admin_client.get(change_url(admin_ticket)).content.decode()

    assert f"/admin/tickets/ticket/{admin_ticket.pk}/" in page
    for slug in ("take-over", "hand-back", "resolve", "close"):
        assert button_url(admin_ticket, slug) not in page


def test_take_over_gives_the_ticket_to_me_and_records_it(admin_client, admin_user, admin_ticket):
    response = admin_client.post(button_url(admin_ticket, "take-over"), follow=True)

    admin_ticket.refresh_from_db()
    assert response.redirect_chain == [(change_url(admin_ticket), 302)]
    assert "Take over: ticket #" in text_of(response) and "is now with a person" in text_of(response)
    assert admin_ticket.status == TicketStatus.WITH_HUMAN and admin_ticket.assignee == admin_user
    assert staff_changes(admin_ticket) == [("open", "with_human", admin_user.pk)]


@pytest.mark.parametrize(("slug", "status"), [("resolve", "resolved"), ("close", "closed")])
def test_resolve_and_close_move_the_ticket_and_record_who(admin_client, admin_user, admin_ticket, slug, status):
    response = admin_client.post(button_url(admin_ticket, slug), follow=True)

    admin_ticket.refresh_from_db()
    assert response.redirect_chain == [(change_url(admin_ticket), 302)]
    assert f"is now {status}" in text_of(response)
    assert admin_ticket.status == status
    assert staff_changes(admin_ticket) == [("open", status, admin_user.pk)]


def test_hand_back_gives_the_ticket_to_the_agent_and_rings_it_once(
    admin_client, admin_user, admin_ticket, rings, django_capture_on_commit_callbacks
):
    services.ticket_take_over(ticket=admin_ticket, user=admin_user)
    signals, enqueued = rings

    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(button_url(admin_ticket, "hand-back"), follow=True)

    admin_ticket.refresh_from_db()
    assert "is now open" in text_of(response)
    assert admin_ticket.status == TicketStatus.OPEN and admin_ticket.assignee is None
    assert staff_changes(admin_ticket)[-1] == ("with_human", "open", admin_user.pk)
    assert signals == [admin_ticket.pk]
    assert enqueued == [admin_ticket.pk]


def test_the_bulk_hand_back_rings_the_agent_once_per_ticket(
    admin_client, admin_user, admin_ticket, rings, django_capture_on_commit_callbacks
):
    services.ticket_take_over(ticket=admin_ticket, user=admin_user)
    signals, enqueued = rings

    with django_capture_on_commit_callbacks(execute=True):
        admin_client.post("/admin/tickets/ticket/", {"action": "move_to_open", "_selected_action": [admin_ticket.pk]})

    admin_ticket.refresh_from_db()
    assert admin_ticket.status == TicketStatus.OPEN
    assert signals == [admin_ticket.pk]
    assert enqueued == [admin_ticket.pk]


def test_a_move_the_status_rules_refuse_is_explained_and_changes_nothing(admin_client, admin_user, admin_ticket):
    services.ticket_close(ticket=admin_ticket, user=admin_user)
    events_before = admin_ticket.events.count()

    response = admin_client.post(button_url(admin_ticket, "resolve"), follow=True)

    admin_ticket.refresh_from_db()
    assert response.redirect_chain == [(change_url(admin_ticket), 302)]
    assert "cannot go from closed to resolved" in text_of(response)
    assert admin_ticket.status == TicketStatus.CLOSED and admin_ticket.events.count() == events_before


def test_a_button_url_refuses_a_get(admin_client, admin_ticket):
    for slug in ("take-over", "hand-back", "resolve", "close"):
        assert admin_client.get(button_url(admin_ticket, slug)).status_code == 405
    admin_ticket.refresh_from_db()
    assert admin_ticket.status == TicketStatus.OPEN and staff_changes(admin_ticket) == []


def test_a_button_needs_the_csrf_token(admin_user, admin_ticket):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)

    assert client.post(button_url(admin_ticket, "close")).status_code == 403
    admin_ticket.refresh_from_db()
    assert admin_ticket.status == TicketStatus.OPEN


def test_a_button_with_the_token_from_the_ticket_page_works(admin_user, admin_ticket):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    page = client.get(change_url(admin_ticket)).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)

    assert client.post(button_url(admin_ticket, "close"), {"csrfmiddlewaretoken": token}).status_code == 302
    admin_ticket.refresh_from_db()
    assert admin_ticket.status == TicketStatus.CLOSED


def test_a_customer_cannot_use_the_buttons(client, admin_ticket):
    client.force_login(admin_ticket.customer.user)

    response = client.post(button_url(admin_ticket, "close"))

    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    admin_ticket.refresh_from_db()
    assert admin_ticket.status == TicketStatus.OPEN


def test_staff_who_may_only_view_tickets_cannot_use_the_buttons(client, django_user_model, admin_ticket):
    viewer = django_user_model.objects.create_user(username="viewer", password="pw-for-tests-123", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_ticket"))
    client.force_login(viewer)

    page = client.get(change_url(admin_ticket))
    response = client.post(button_url(admin_ticket, "close"))

    assert page.status_code == 200 and button_url(admin_ticket, "close") not in page.content.decode()
    assert response.status_code == 403
    admin_ticket.refresh_from_db()
    assert admin_ticket.status == TicketStatus.OPEN


# --- Customer and assignee as autocompletes ---------------------------------------------


def test_the_assignee_is_an_autocomplete_and_the_customer_is_not_editable(admin_client, admin_ticket):
    page = admin_client.get(change_url(admin_ticket)).content.decode()

    select = re.search(r'<select name="assignee"[^>]*>', page)
    assert select is not None and "admin-autocomplete" in select.group(0)
    assert "vForeignKeyRawIdAdminField" not in page
    # The conversation belongs to the customer who opened it: shown, never a field to change.
    assert re.search(r'name="customer"', page) is None
    assert html.escape(str(admin_ticket.customer)) in page


def test_the_customer_autocomplete_finds_customers_by_email(admin_client, admin_ticket):
    erin = make_customer("erin")

    response = admin_client.get(
        "/admin/autocomplete/",
        {"term": "erin@", "app_label": "tickets", "model_name": "order", "field_name": "customer"},
    )

    assert response.status_code == 200
    assert [item["id"] for item in response.json()["results"]] == [str(erin.pk)]


def _ticket_page(admin_client, ticket) -> dict:  # noqa: ANN001
    """The admin's ticket page as a browser would post it back, unchanged."""
    page = admin_client.get(reverse("admin:tickets_ticket_change", args=[ticket.pk]))
    form = page.context["adminform"].form
    data = {name: form[name].value() or "" for name in form.fields}
    for inline in page.context["inline_admin_formsets"]:
        management = inline.formset.management_form
        for name in management.fields:
            data[f"{inline.formset.prefix}-{name}"] = management[name].value()
    return data


def _save_ticket_page(admin_client, ticket, data):  # noqa: ANN001, ANN202
    return admin_client.post(reverse("admin:tickets_ticket_change", args=[ticket.pk]), data)


def test_changing_the_assignee_on_the_ticket_page_is_recorded_with_who_did_it(admin_client, admin_user, admin_ticket):
    from tests.staff.conftest import make_support_staff

    colleague = make_support_staff("colleague")
    data = {**_ticket_page(admin_client, admin_ticket), "assignee": colleague.pk}
    response = _save_ticket_page(admin_client, admin_ticket, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    admin_ticket.refresh_from_db()
    assert admin_ticket.assignee == colleague
    event = admin_ticket.events.get(kind="assigned")
    assert event.actor_user == admin_user and event.payload["assignee"] == "colleague"


def test_an_order_with_a_refund_keeps_what_the_refund_was_paid_against(admin_client, sandbox):
    from agents.runner import advance
    from tests.agents.test_money_gates import Refunds
    from tests.agents.test_money_path import order_for
    from tickets import services as ticket_services

    customer = make_customer()
    order = order_for(customer, "OA-1001", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund OA-1001")
    advance(ticket.pk, model=Refunds(("OA-1001", 1000)))
    assert order.refunds.count() == 1

    page = admin_client.get(f"/admin/tickets/order/{order.pk}/change/")
    form = page.context["adminform"].form
    assert not {"number", "customer", "currency", "payment_reference"} & set(form.fields)
    assert {"status", "total_cents"} <= set(form.fields)  # the rest stays editable


def test_saving_a_ticket_page_read_before_a_take_over_does_not_undo_it(admin_client, admin_ticket):
    from tests.staff.conftest import make_support_staff

    stale = _ticket_page(admin_client, admin_ticket)  # nobody assigned
    maria = make_support_staff("maria-admin")
    services.ticket_take_over(ticket=admin_ticket.pk, user=maria)

    # Only the priority was changed on the page: it is saved, and Maria keeps the ticket.
    response = _save_ticket_page(admin_client, admin_ticket, {**stale, "priority": "high"})
    assert response.status_code == 302, response.content.decode()[:2000]
    admin_ticket.refresh_from_db()
    assert admin_ticket.priority == "high" and admin_ticket.assignee == maria

    # The assignee changed on the stale page: refused, nothing saved.
    li = make_support_staff("li-admin")
    refused = _save_ticket_page(admin_client, admin_ticket, {**stale, "assignee": li.pk, "subject": "Renamed"})
    assert (
        refused.status_code == 200 and "changed by someone else since this page was opened" in refused.content.decode()
    )
    admin_ticket.refresh_from_db()
    assert admin_ticket.assignee == maria and admin_ticket.subject != "Renamed"


def test_a_ticket_is_not_assigned_to_someone_who_cannot_work_tickets(admin_client, admin_ticket):
    customer = make_customer("assigned-customer")
    response = _save_ticket_page(
        admin_client, admin_ticket, {**_ticket_page(admin_client, admin_ticket), "assignee": customer.user.pk}
    )
    assert response.status_code == 200
    admin_ticket.refresh_from_db()
    assert admin_ticket.assignee is None
    with pytest.raises(ValidationError, match="cannot work tickets"):
        services.ticket_edit(ticket=admin_ticket.pk, user=customer.user, changes={"assignee": customer.user})
