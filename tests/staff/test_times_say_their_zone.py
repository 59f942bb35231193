"""Every time a staff page shows says which zone it is in, and is one the browser can show in its own.

The staff pages showed times in the server's zone with nothing to say so ("2026-12-05 21:05:53"): a
person working from New York read when the customer wrote, when a colleague took the ticket, when a
request was decided, five hours off, while the customer's chat shows the customer their own local
times. Each time is now written with its zone, in a <time> element carrying the instant, which the
page shows in the reader's own zone (static/js/localtime.js).
"""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from approvals import services as approval_services
from tests.approvals.conftest import make_staff
from tests.approvals.test_dashboard import paused
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

A_TIME = re.compile(r"\b\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\b|\b\d{2}:\d{2}:\d{2}\b")
TIME_ELEMENT = re.compile(r'<time datetime="([^"]+)"[^>]*>([^<]*)</time>')


def _times_without_a_zone(html: str) -> list[str]:
    """Each time the page shows outside a <time datetime> element, or inside one without its zone."""
    bare = []
    for instant, shown in TIME_ELEMENT.findall(html):
        if not re.search(r"[+-]\d{2}:\d{2}$", instant) or not shown.rstrip().endswith(" EST"):
            bare.append(f"<time datetime={instant!r}>{shown}</time>")
    outside = TIME_ELEMENT.sub("", re.sub(r"<script.*?</script>", "", html, flags=re.S))
    outside = re.sub(r'datetime="[^"]*"', "", outside)
    bare += [match.group(0) for match in A_TIME.finditer(outside)]
    return bare


def test_every_time_on_the_staff_pages_says_its_zone(sandbox, settings):
    approver = make_staff("approver", can_decide=True)
    settings.TIME_ZONE = "America/New_York"
    ticket, approval = paused(sandbox, "Z-4001")
    decided_ticket, decided = paused(sandbox, "Z-4002")
    maria = make_support_staff("maria", first_name="Maria")
    ticket_services.staff_note(ticket=ticket.pk, user=maria, body="Checking the parcel.", client_msg_id="maria-1")
    approval_services.approval_decide(approval_id=decided.pk, user=approver, approve=False, note="Not this one.")
    person = Client()
    person.force_login(maria)
    decider = Client()
    decider.force_login(approver)

    pages = {
        "ticket page": person.get(reverse("staff:ticket", args=[ticket.pk])),
        "decided ticket page": person.get(reverse("staff:ticket", args=[decided_ticket.pk])),
        "inbox": person.get(reverse("staff:inbox") + "?view=open"),
        "approval queue": person.get(reverse("staff:inbox") + "?view=approval"),
        "dashboard": decider.get("/staff/approvals/"),
        "history": decider.get("/staff/approvals/history/"),
    }
    timeline = person.get(reverse("staff:timeline", args=[ticket.pk]) + "?after=0").json()

    found = {name: _times_without_a_zone(page.content.decode()) for name, page in pages.items()}
    found["live timeline"] = _times_without_a_zone(timeline["html"] + timeline["side_html"])
    assert all(page.status_code == 200 for page in pages.values())
    assert {name: times for name, times in found.items() if times} == {}


def test_the_admin_shows_times_with_their_zone(admin_client, settings):
    settings.TIME_ZONE = "America/New_York"
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Kettle", body="Where is it?")

    listed = admin_client.get(reverse("admin:tickets_ticket_changelist")).content.decode()
    page = admin_client.get(reverse("admin:tickets_ticket_change", args=[ticket.pk])).content.decode()

    at = r"\d{1,2}:\d{2}:\d{2}"
    assert re.search(at + " EST<", listed) and not re.search(at + "<", listed), "a time on the ticket list has no zone"
    assert re.search(at + " EST<", page) and not re.search(at + "<", page), "a time on the ticket page has no zone"
