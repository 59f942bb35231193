"""A person on the team reads every time on the staff pages in their own zone, as the customer's chat
shows the customer theirs: the timeline, a colleague's note that arrives live, the inbox. The pages
showed the server's clock with no zone ("2026-12-05 21:05:53"), which a person working from Tokyo
read nine hours off."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from tests.browser.conftest import Stack
from tests.browser.test_staff_inbox import sign_in_person
from tests.browser.test_staff_ticket_stays_live import ticket_with_a_person
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import TicketEvent

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

TOKYO = ZoneInfo("Asia/Tokyo")


def in_tokyo(moment: datetime) -> str:
    return moment.astimezone(TOKYO).strftime("%Y-%m-%d %H:%M:%S GMT+9")


def test_times_on_the_staff_pages_are_shown_in_the_readers_zone(live: Stack, browser):  # noqa: ANN001
    ticket = ticket_with_a_person(live)
    make_support_staff("maria", first_name="Maria")
    colleague = make_support_staff("li", first_name="Li")
    asked = TicketEvent.objects.filter(ticket=ticket, kind="message").order_by("seq").first()
    person = sign_in_person(browser, live, "maria", timezone_id="Asia/Tokyo")

    person.goto(live.url(f"/staff/tickets/{ticket.pk}/"))
    first = person.locator(f"#timeline li[data-seq='{asked.seq}'] time").inner_text()
    assert first == in_tokyo(asked.created_at), f"the customer's message shows {first!r}"

    services.staff_note(ticket=ticket, user=colleague, body="Li: I called the courier.", client_msg_id="li-1")
    noted = TicketEvent.objects.filter(ticket=ticket, kind="message").order_by("-seq").first()
    person.wait_for_selector(f"#timeline li[data-seq='{noted.seq}']")
    live_note = person.locator(f"#timeline li[data-seq='{noted.seq}'] time").inner_text()
    assert live_note == in_tokyo(noted.created_at), f"the note that came in live shows {live_note!r}"

    person.goto(live.url("/staff/?view=needs_person"))
    waiting = person.locator("table time").first.inner_text()
    assert waiting.endswith(" GMT+9"), f"the inbox shows {waiting!r}"
    assert person.evaluate("window.__csp") == []
