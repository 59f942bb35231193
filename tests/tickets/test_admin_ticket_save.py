"""Saving the ticket page in the admin writes only what the form changed, on the row as it is now:
an assignee change, a take-over or an event that landed meanwhile is never written back over
(its read-only columns, such as the status and the event counter, stay as they are).
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import Max
from django.urls import reverse

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.admin import TicketAdmin
from tickets.models import Ticket, TicketStatus

pytestmark = pytest.mark.django_db


def _post_data(client, ticket):  # noqa: ANN001, ANN202
    page = client.get(reverse("admin:tickets_ticket_change", args=[ticket.pk]))
    form = page.context["adminform"].form
    data = {name: form[name].value() or "" for name in form.fields}
    for inline in page.context["inline_admin_formsets"]:
        management = inline.formset.management_form
        for name in management.fields:
            data[f"{inline.formset.prefix}-{name}"] = management[name].value()
    return data


def test_changing_the_assignee_keeps_the_event_counter_and_take_over_still_works(admin_client, admin_user):
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="Refund please")
    colleague = make_support_staff("colleague2")
    data = _post_data(admin_client, ticket)
    data["assignee"] = colleague.pk

    response = admin_client.post(reverse("admin:tickets_ticket_change", args=[ticket.pk]), data)
    assert response.status_code == 302

    ticket.refresh_from_db()
    highest = ticket.events.aggregate(m=Max("seq"))["m"]
    # The "assigned" event was numbered by the service; the form's save must not move the counter back.
    assert ticket.last_event_seq == highest


def test_after_an_assignee_change_in_the_admin_a_person_can_still_take_the_ticket(admin_client, admin_user):
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="Refund please")
    colleague = make_support_staff("colleague4")
    data = _post_data(admin_client, ticket)
    data["assignee"] = colleague.pk
    assert admin_client.post(reverse("admin:tickets_ticket_change", args=[ticket.pk]), data).status_code == 302

    # The next event (a person taking the ticket from the agent) must not collide with the "assigned" one.
    services.ticket_take_over(ticket=ticket.pk, user=admin_user)
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN


def test_a_take_over_landing_while_the_form_is_saved_is_not_reverted(admin_client, admin_user, monkeypatch):
    """A colleague (or a refund escalation) gives the ticket to a person while an admin saves an
    unrelated field (the priority): the form writes its stale status back and the agent has it again."""
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="Refund please")
    colleague = get_user_model().objects.create_user(username="colleague3", password="x", is_staff=True)
    data = _post_data(admin_client, ticket)
    data["priority"] = "high" if data.get("priority") != "high" else "low"

    original = TicketAdmin.save_form

    def save_form_while_taken_over(self, request, form, change):  # noqa: ANN001, ANN202
        services.ticket_take_over(ticket=form.instance.pk, user=colleague)  # commits meanwhile
        return original(self, request, form, change)

    monkeypatch.setattr(TicketAdmin, "save_form", save_form_while_taken_over)
    response = admin_client.post(reverse("admin:tickets_ticket_change", args=[ticket.pk]), data)
    assert response.status_code == 302

    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN


def test_an_edit_is_one_event_saying_who_changed_what_and_the_customer_cannot_be_changed(admin_client, admin_user):
    alice, mallory = make_customer("alice-edit"), make_customer("mallory-edit")
    ticket, _ = services.ticket_open(customer=alice, subject="Kettle", body="Refund please")
    data = _post_data(admin_client, ticket)
    data.update(subject="Kettle arrived broken", priority="high", customer=mallory.pk)

    response = admin_client.post(reverse("admin:tickets_ticket_change", args=[ticket.pk]), data)
    assert response.status_code == 302

    ticket.refresh_from_db()
    assert (ticket.subject, ticket.priority, ticket.customer_id) == ("Kettle arrived broken", "high", alice.pk)
    edited = ticket.events.get(kind="edited")
    assert edited.actor_user == admin_user and not edited.is_public
    assert edited.payload == {
        "subject": {"from": "Kettle", "to": "Kettle arrived broken"},
        "priority": {"from": "normal", "to": "high"},
    }
    assert ticket.last_event_seq == edited.seq


def test_the_service_edits_only_what_staff_may_edit(admin_user):
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="Refund please")

    with pytest.raises(ValidationError):
        services.ticket_edit(ticket=ticket.pk, user=admin_user, changes={"status": "closed"})
    with pytest.raises(ValidationError):
        services.ticket_edit(ticket=ticket.pk, user=admin_user, changes={"priority": "whenever"})
    with pytest.raises(ValidationError):
        services.ticket_edit(ticket=ticket.pk, user=admin_user, changes={"subject": "   "})
    services.ticket_edit(ticket=ticket.pk, user=admin_user, changes={"priority": "normal"})  # unchanged: no event

    assert not Ticket.objects.get(pk=ticket.pk).events.filter(kind="edited").exists()
