"""An admin page's save that races a person working the ticket in the inbox is refused, not
written over them.

README ("Using it", Operations): the admin changes a ticket through the same services as the inbox,
and a page read before someone else's change is refused ("changed by someone else since this page
was opened; nothing was saved"). The page was compared with the row before the save took the row's
lock: a take-over committed between that comparison and the save was written over, silently. The
admin's "Assign to Li" landed on a ticket Maria had just taken in the inbox; Maria's next reply was
refused ("li has taken ticket #N"), and neither of them was told. The same page sent twice (a double
click on Save) was told its own change was "changed by someone else".
"""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, connections, transaction
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import Ticket, TicketStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def _page_as_shown(client: Client, ticket: Ticket) -> dict:
    page = client.get(reverse("admin:tickets_ticket_change", args=[ticket.pk]))
    assert page.status_code == 200
    form = page.context["adminform"].form
    data = {name: form[name].value() or "" for name in form.fields}
    for inline in page.context["inline_admin_formsets"]:
        management = inline.formset.management_form
        for name in management.fields:
            data[f"{inline.formset.prefix}-{name}"] = management[name].value()
    return data


def _admin() -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("ops", "ops@example.test", "pw-admin-123"))
    return client


def _waiting_on_a_row_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' "
            "AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0] > 0


def _post_in_thread(client: Client, url: str, data: dict, answers: list) -> threading.Thread:
    def post() -> None:
        try:
            answers.append(client.post(url, data))
        finally:
            connections.close_all()

    thread = threading.Thread(target=post)
    thread.start()
    return thread


def test_an_assignment_saved_in_the_admin_while_a_person_takes_the_ticket_does_not_take_it_from_them():
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle K-1 leaks.")
    maria, li = make_support_staff("maria"), make_support_staff("li")
    admin = _admin()
    data = _page_as_shown(admin, ticket)  # read while the agent has the ticket, nobody assigned
    data["assignee"] = li.pk
    url = reverse("admin:tickets_ticket_change", args=[ticket.pk])

    answers: list = []
    with transaction.atomic():
        # Maria is taking the ticket in the inbox (her transaction holds its row) when the save arrives.
        Ticket.objects.select_for_update().get(pk=ticket.pk)
        saving = _post_in_thread(admin, url, data, answers)
        deadline = time.monotonic() + 20
        while not _waiting_on_a_row_lock() and saving.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        services.ticket_take_over(ticket=ticket.pk, user=maria)
    saving.join(30)

    ticket.refresh_from_db()
    assert (ticket.status, ticket.assignee_id) == (TicketStatus.WITH_HUMAN, maria.pk), (
        "A save of the admin page read before Maria took the ticket wrote its assignee over her take-over: "
        f"the ticket is now {ticket.status}, assigned to {ticket.assignee}, and her next reply is refused"
    )
    assert answers and answers[0].status_code == 200, "the admin is told the page was out of date"
    assert "changed by someone else" in answers[0].content.decode()
    # Her reply, from the page that shows her holding it, is sent.
    _, created = services.staff_reply(
        ticket=ticket.pk, user=maria, body="I'm on it.", client_msg_id="m1", holder_seen=maria.pk
    )
    assert created


def test_the_same_admin_page_saved_twice_is_saved_once_and_not_called_someone_elses_change():
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle K-1 leaks.")
    admin = _admin()
    data = _page_as_shown(admin, ticket)
    data["subject"] = "Kettle K-1 leaks"
    url = reverse("admin:tickets_ticket_change", args=[ticket.pk])

    first = admin.post(url, data)
    again = admin.post(url, data)  # a double click on Save, or the browser sending the form again

    assert first.status_code == 302
    assert again.status_code == 302, "the same page sent again was refused as a change by someone else: " + " ".join(
        str(e) for e in again.context["adminform"].form.non_field_errors()
    )
    ticket.refresh_from_db()
    assert ticket.subject == "Kettle K-1 leaks"
    assert ticket.events.filter(kind="edited").count() == 1
