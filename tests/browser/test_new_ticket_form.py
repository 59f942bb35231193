"""The new-ticket form when the session ended while the customer wrote: sent to sign in, the POST
(with their words) was dropped on the way, and the form came back empty after signing in."""

from __future__ import annotations

import re

import pytest
from django.contrib.sessions.models import Session

from tests.browser.conftest import PASSWORD, Stack, sign_in
from tests.conftest import make_customer
from tickets.models import AuthorKind, Message, Ticket

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


def test_a_new_ticket_sent_after_the_session_ended_is_back_in_the_form_after_signing_in(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    page = sign_in(browser, live, customer)
    page.goto(live.url("/tickets/new/"))
    words = "My kettle arrived with a cracked lid and the base is scratched; order A-1001."
    page.fill("#id_subject", "Cracked kettle")
    page.fill("#id_body", words)
    Session.objects.all().delete()  # the session ended on the server meanwhile
    page.click("form.new-ticket button[type=submit]")
    page.wait_for_url(re.compile(r"/accounts/login/"))
    assert not Ticket.objects.filter(customer=customer).exists()

    page.fill("#id_username", customer.user.username)
    page.fill("#id_password", PASSWORD)
    page.click("main form button[type=submit]")
    page.wait_for_url(live.url("/tickets/new/"))
    assert page.input_value("#id_body") == words and page.input_value("#id_subject") == "Cracked kettle"
    assert "back: press Send" in page.inner_text("#new-ticket-kept")

    page.click("form.new-ticket button[type=submit]")
    page.wait_for_url(re.compile(r"/tickets/\d+/$"))
    ticket = Ticket.objects.get(customer=customer)
    assert (
        Message.objects.get(ticket=ticket, author_kind=AuthorKind.CUSTOMER).body == words
    )  # the agent may answer by now
    page.goto(live.url("/tickets/new/"))  # the ticket is made: the form is empty again
    assert page.input_value("#id_body") == ""
    page.context.close()
