"""My tickets and the chat in a real browser: the unread marker comes and goes, a live message of a
new day gets its "Today" separator, and the rating form appears when the ticket is resolved."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import AgentRun, RunStatus
from tests.browser.conftest import SCREENSHOTS, Stack, sign_in
from tests.browser.test_accessibility import assert_rings_visible, check_page
from tests.browser.test_customer_chat import in_another_thread
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tests.workers import wait_until
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, Ticket, TicketEvent, TicketRating

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

SEPARATORS = "Array.from(document.querySelectorAll('#chat-log li.day-separator')).map(li => li.textContent)"
AFTER_TODAY = (
    "(() => { const s = Array.from(document.querySelectorAll('#chat-log li.day-separator'))"
    ".find(li => li.textContent === 'Today'); const next = s && s.nextElementSibling;"
    " return next ? next.querySelector('.bubble').textContent : null; })()"
)


def answered(ticket: Ticket, replies: int) -> bool:
    return (
        Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, is_public=True).count() >= replies
        and not AgentRun.objects.filter(ticket=ticket, status=RunStatus.RUNNING).exists()
    )


def test_unread_marker_live_day_separator_and_rating_in_a_real_browser(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    person = make_support_staff("ravi")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Where is my kettle", body="Hello there")
    wait_until(lambda: answered(ticket, 1), timeout=30, what="the agent's first answer", cluster=live.cluster)
    # The conversation so far happened yesterday.
    TicketEvent.objects.filter(ticket=ticket).update(created_at=timezone.now() - timedelta(days=1))

    page = sign_in(browser, live, customer)  # lands on My tickets
    row = page.locator(f"a.ticket-row[href='/tickets/{ticket.pk}/']")
    assert "unread" in row.get_attribute("class") and "New reply" in row.inner_text()
    assert "Support assistant:" in row.locator(".ticket-preview").inner_text()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "my-tickets-unread.png"))
    check_page(page, "my tickets, a reply unread")

    row.click()
    page.wait_for_url(live.url(f"/tickets/{ticket.pk}/"))
    page.wait_for_function("() => window.__chat.state().status !== undefined")
    assert page.evaluate(SEPARATORS) == ["Yesterday"]
    assert page.locator("#chat-rating").is_hidden()

    page.fill("#chat-input", "Is it shipped yet?")
    page.keyboard.press("Enter")
    page.wait_for_function(f"() => {SEPARATORS}.length === 2", timeout=15_000)
    assert page.evaluate(SEPARATORS) == ["Yesterday", "Today"]
    assert page.evaluate(AFTER_TODAY) == "Is it shipped yet?"
    check_page(page, "the chat, two days")

    # The agent's answer arrives while the page is open and visible: it is read, not news.
    page.wait_for_function(
        "() => document.querySelectorAll('#chat-log li.msg.from-agent[data-seq]').length >= 2", timeout=30_000
    )
    assert page.evaluate(SEPARATORS) == ["Yesterday", "Today"]  # the same day: no second "Today"
    last_reply = (
        TicketEvent.objects.filter(ticket=ticket, kind="message", is_public=True, actor_kind=AuthorKind.AGENT)
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    wait_until(
        lambda: Ticket.objects.get(pk=ticket.pk).customer_seen_seq >= last_reply,
        timeout=30,
        what="the open chat to mark the answer seen",
        cluster=live.cluster,
    )

    in_another_thread(lambda: ticket_services.ticket_resolve(ticket=ticket.pk, user=person))
    page.wait_for_selector("#chat-rating", state="visible")
    page.screenshot(path=str(SCREENSHOTS / "rating-form.png"))
    check_page(page, "a resolved ticket's chat with the rating form")
    assert_rings_visible(page, "a resolved ticket's chat with the rating form")
    page.check("#chat-rating input[name=score][value='5']")
    page.fill("#rating-comment", "Fast, thank you")
    page.click("#chat-rating button[type=submit]")
    page.wait_for_selector("#chat-log .notice.tone-ok >> text=Thanks for your rating.")
    rating = TicketRating.objects.get(ticket=ticket)
    assert (rating.score, rating.comment) == (5, "Fast, thank you")
    assert "You rated this conversation 5 out of 5" in page.locator("#chat-rating legend").inner_text()
    check_page(page, "a rated ticket's chat")

    page.goto(live.url("/tickets/"))
    row = page.locator(f"a.ticket-row[href='/tickets/{ticket.pk}/']")
    assert "unread" not in row.get_attribute("class") and "New reply" not in row.inner_text()
    assert "Resolved" in row.inner_text()
    page.context.close()
