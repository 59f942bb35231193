"""A customer's session expires while the chat is open (nobody signs out, so no notice goes out): the
page says so at once, with a way to sign in again, instead of staying "connected" to a conversation
its session no longer opens."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.sessions.models import Session
from django.utils import timezone

from tests.browser.conftest import Stack, sign_in
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

SESSION_SECONDS = 10


def test_the_chat_says_signed_out_when_the_session_expires(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Short session", body="Hello there")
    page = sign_in(browser, live, customer)
    key = next(c["value"] for c in page.context.cookies() if c["name"] == "sessionid")
    # A session near its end (or a site with short sessions): its stored end, which the server reads.
    Session.objects.filter(session_key=key).update(expire_date=timezone.now() + timedelta(seconds=SESSION_SECONDS))

    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    page.wait_for_function("() => window.__chat.state().connected")  # live, before the session ends

    page.locator("#chat-connection", has_text="You were signed out").wait_for()
    assert page.locator("#chat-connection a", has_text="Sign in again").count() == 1
    assert page.evaluate("() => window.__chat.state().connected") is False
    assert page.evaluate("() => window.__csp") == []
    page.context.close()
