"""A rating sent after the customer's session ended on the server: they are sent to sign in (nothing
was rated), and back on the chat their score and comment are in the form again, to send with one
press; once sent, a reload does not put them back."""

from __future__ import annotations

import pytest
from django.contrib.sessions.models import Session

from tests.browser.conftest import PASSWORD, Stack, sign_in
from tests.browser.test_customer_chat import in_another_thread, wait_for_agent_messages
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services as ticket_services
from tickets.models import TicketRating

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_a_rating_sent_after_the_session_ended_is_back_in_the_form_after_signing_in(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    person = make_support_staff("ravi")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)
    in_another_thread(lambda: ticket_services.ticket_resolve(ticket=ticket.pk, user=person))
    page.wait_for_selector("#chat-rating", state="visible")
    words = "Quick and kind, thank you. The kettle works fine now."
    page.check("#chat-rating input[name=score][value='4']")
    page.fill("#rating-comment", words)
    Session.objects.all().delete()  # the session ended on the server meanwhile
    page.click("#chat-rating button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" in url)
    assert not TicketRating.objects.filter(ticket=ticket).exists()

    page.fill("#id_username", customer.user.username)
    page.fill("#id_password", PASSWORD)
    page.click("main form button[type=submit]")
    page.wait_for_url(live.url(f"/tickets/{ticket.pk}/"))
    assert page.input_value("#rating-comment") == words, "the comment they wrote is gone"
    assert page.is_checked("#chat-rating input[name=score][value='4']")
    assert "press Send rating" in page.inner_text("#rating-kept")

    page.click("#chat-rating button[type=submit]")
    page.wait_for_selector("#chat-rating legend:has-text('You rated this conversation 4 out of 5')")
    rating = TicketRating.objects.get(ticket=ticket)
    assert (rating.score, rating.comment) == (4, words)
    page.reload()  # sent: not put back as unsent
    page.wait_for_selector("#chat-rating", state="visible")
    assert page.locator("#rating-kept").count() == 0
    assert page.evaluate("window.__csp") == []
    page.context.close()
