"""A reply sent twice (a double click) whose second copy waits for the ticket while the first is
posted and a colleague then takes the ticket: the second is the first's result, not a refusal.

README ("Using it", staff): a double-clicked reply is posted once. The second request looked for
its message before it had the ticket's row, found none (the first was still being written), then
waited for the row behind the first and behind a colleague's reply that took the ticket. It was then
refused: "li has taken ticket #N since this page was opened; your reply was not sent", though it
had been sent. The page showed the words back in the box, under a new message ID, as unsent:
sent again, the customer got the same reply twice.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections, transaction
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import AuthorKind, Message, Ticket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

WORDS = "Maria here: a new kettle is on its way."


def _waiting_on_a_row_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' "
            "AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0] > 0


def test_the_second_click_of_a_reply_is_not_refused_as_unsent_after_a_colleague_took_the_ticket():
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle K-1 leaks.")
    maria, li = make_support_staff("maria"), make_support_staff("li")
    browser = Client()
    browser.force_login(maria)
    page = browser.get(reverse("staff:ticket", args=[ticket.pk]))  # the agent has it: holder ""
    form = {"body": WORDS, "client_msg_id": page.context["reply_id"], "holder": page.context["holder"]}
    answers: list = []

    def second_click() -> None:
        try:
            answers.append(browser.post(reverse("staff:reply", args=[ticket.pk]), form))
        finally:
            connections.close_all()

    with transaction.atomic():
        Ticket.objects.select_for_update().get(pk=ticket.pk)  # the first click is being written
        clicked = threading.Thread(target=second_click)
        clicked.start()
        deadline = time.monotonic() + 20
        while not _waiting_on_a_row_lock() and clicked.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        # The first click posts the reply; Li, whose page names Maria, then answers and takes the ticket.
        services.staff_reply(
            ticket=ticket.pk, user=maria, body=WORDS, client_msg_id=form["client_msg_id"], holder_seen=None
        )
        services.staff_reply(ticket=ticket.pk, user=li, body="Li here.", client_msg_id="li-1", holder_seen=maria.pk)
    clicked.join(30)

    second = answers[0]
    if second.status_code == 409:  # what Maria does with the words shown back as unsent: she sends them
        again = second.context["reply_id"]
        page_now = {"client_msg_id": again, "holder": second.context["holder"]}
        browser.post(reverse("staff:reply", args=[ticket.pk]), {**form, **page_now})
    sent = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.STAFF, body=WORDS).count()
    assert sent == 1, f"the customer got Maria's reply {sent} times"
    assert second.status_code == 302, (
        f"the second click of a reply that was posted was answered {second.status_code}: "
        + " ".join(str(m) for m in second.context["messages"])
    )
