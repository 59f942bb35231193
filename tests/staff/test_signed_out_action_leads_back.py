"""A button pressed on a staff page whose session had ended (reply, note, take over, hand back,
resolve, close, assign) leads to sign in and then back to the page it was
pressed on. ``next`` was the POST-only action's URL: after signing in the browser landed on a bare
405 "Method Not Allowed". Nothing was done, and the pages say so."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.staff.conftest import STAFF_PASSWORD, make_support_staff
from tickets import services
from tickets.models import Message, Ticket

pytestmark = pytest.mark.django_db


def _sign_in_after(browser: Client, sent) -> object:  # noqa: ANN001
    assert sent.status_code == 302
    signed_in = browser.post(sent["Location"], {"username": "maria", "password": STAFF_PASSWORD})
    assert signed_in.status_code == 302
    return browser.get(signed_in["Location"])


@pytest.mark.parametrize("action", ["reply", "note", "take-over", "hand-back", "resolve", "close", "assign"])
def test_signing_in_after_a_button_pressed_while_signed_out_leads_back_to_the_ticket(customer, action):  # noqa: ANN001
    make_support_staff("maria")
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is it?")
    browser = Client()  # the session expired while the ticket page was open

    sent = browser.post(f"/staff/tickets/{ticket.pk}/{action}", {"body": "Hello, Maria here.", "client_msg_id": "r1"})
    landed = _sign_in_after(browser, sent)

    assert landed.status_code == 200
    assert landed.request["PATH_INFO"] == reverse("staff:ticket", args=[ticket.pk])
    assert "what you sent was not done" in landed.content.decode()
    assert Ticket.objects.get(pk=ticket.pk).status == "open"
    assert not Message.objects.filter(ticket=ticket, client_msg_id="r1").exists()


def test_a_page_asked_for_while_signed_out_is_shown_after_signing_in(db):  # noqa: ANN001
    make_support_staff("maria")
    browser = Client()

    landed = _sign_in_after(browser, browser.get(reverse("staff:inbox"), {"q": "Kettle"}))

    assert landed.status_code == 200
    assert (landed.request["PATH_INFO"], landed.request["QUERY_STRING"]) == (reverse("staff:inbox"), "q=Kettle")
