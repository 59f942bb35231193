"""A new ticket over the customer's limit keeps what they wrote: the form again, with their words, the
reason and the wait, not a bare line of text with nothing of theirs on it."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tickets.models import Ticket

pytestmark = pytest.mark.django_db


def test_a_new_ticket_over_the_limit_comes_back_with_the_words_the_reason_and_the_wait(client, customer, settings):  # noqa: ANN001
    settings.CUSTOMER_TICKET_RATE = "1/h"
    client.force_login(customer.user)
    first = client.post(reverse("tickets:new"), {"subject": "Kettle", "body": "Where is it?", "client_ref": "ref-1"})
    assert first.status_code == 302
    subject, body = "Broken lid & <handle>", "The lid of my kettle from order A-1002 cracked.\nWhat now?"

    over = client.post(reverse("tickets:new"), {"subject": subject, "body": body, "client_ref": "ref-2"})

    assert over.status_code == 429 and over["Retry-After"].isdigit()
    assert over["Content-Type"].startswith("text/html")
    page = over.content.decode()
    assert "You have opened many tickets just now; please try again in" in page
    assert 'value="Broken lid &amp; &lt;handle&gt;"' in page  # the words are in the form again, as text
    assert ">The lid of my kettle from order A-1002 cracked.\nWhat now?</textarea>" in page
    assert 'name="client_ref" value="ref-2"' in page  # sent again after the wait: one ticket
    assert Ticket.objects.filter(customer=customer).count() == 1
