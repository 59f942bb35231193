"""A new-ticket form sent again with other words opens its own ticket; the same words, the first one.

The Back button restores the form that was sent, with its hidden reference: a customer who types
another problem into it and sends must not have the message dropped (redirected to the first ticket,
nothing stored). It opens a ticket of its own, under a reference derived from its words, so a retry
of that send finds it in turn. The form's page is not kept by the browser (``never_cache``).
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from tickets.models import Message, Ticket

pytestmark = pytest.mark.django_db


def test_a_reused_form_reference_with_other_words_is_not_silently_dropped(client, customer):
    client.force_login(customer.user)
    first = client.post(
        reverse("tickets:new"),
        {"subject": "", "body": "Where is my order A-1001?", "client_ref": "form-back-button"},
    )
    assert first.status_code == 302

    # Back, the same form (same hidden reference) restored, a different problem typed, Send.
    second = client.post(
        reverse("tickets:new"),
        {
            "subject": "Broken kettle",
            "body": "My kettle from order B-2001 arrived broken.",
            "client_ref": "form-back-button",
        },
    )

    stored = list(Message.objects.filter(ticket__customer=customer).values_list("body", flat=True))
    accepted = second.status_code in (200, 201, 302, 303)
    assert not accepted or "My kettle from order B-2001 arrived broken." in stored, (
        f"the second form was accepted ({second.status_code} -> {second.get('Location')}) but its message "
        f"was never stored: messages on the customer's tickets are {stored}, "
        f"tickets {list(Ticket.objects.filter(customer=customer).values_list('subject', flat=True))}"
    )


def test_the_same_form_sent_twice_opens_one_ticket_and_other_words_twice_open_one_more(client, customer):
    client.force_login(customer.user)
    form = {"subject": "", "body": "Where is my order A-1001?", "client_ref": "form-twice"}
    assert client.post(reverse("tickets:new"), form).status_code == 302
    assert client.post(reverse("tickets:new"), form).status_code == 302  # a retried send
    other = {**form, "body": "And my order B-2001?"}
    assert client.post(reverse("tickets:new"), other).status_code == 302
    assert client.post(reverse("tickets:new"), other).status_code == 302  # that one retried
    bodies = sorted(Message.objects.filter(ticket__customer=customer).values_list("body", flat=True))
    assert bodies == ["And my order B-2001?", "Where is my order A-1001?"]
    assert "no-store" in client.get(reverse("tickets:new")).get("Cache-Control", "")
