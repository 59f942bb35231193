"""The new-ticket form sent again under a reference it was already used with: refused with a sentence
when its message cannot be taken, and a racing double submit with other words keeps both messages.

README / DESIGN: a customer's message is never lost, and plausible input never gives a failed
request (a 500): a form with a problem in it comes back with a sentence, the words kept.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from tickets import services
from tickets.models import Message


@pytest.mark.django_db
@pytest.mark.parametrize("body", ["", "x" * (services.MESSAGE_MAX_CHARS + 1)], ids=["emptied", "too-long"])
def test_the_form_sent_again_with_a_message_it_cannot_take_is_refused_with_a_sentence(client, customer, body):  # noqa: ANN001
    client.raise_request_exception = False
    client.force_login(customer.user)
    first = client.post(
        reverse("tickets:new"), {"subject": "Late parcel", "body": "Where is order A-1001?", "client_ref": "ref-35a"}
    )
    assert first.status_code == 302
    # Back to the sent form (same hidden reference), the message emptied or pasted too long, Send.
    again = client.post(reverse("tickets:new"), {"subject": "Another thing", "body": body, "client_ref": "ref-35a"})
    assert again.status_code == 400, (
        "a new-ticket form sent again (its reference already used) with a message the product refuses "
        f"(empty or too long) must come back as the form with a sentence (400), not a failed request: "
        f"got {again.status_code}"
    )


@pytest.mark.django_db
def test_a_double_submit_with_other_words_racing_the_first_keeps_both_messages(customer):  # noqa: ANN001
    """Two sends of one form (its hidden reference) arrive together, the second with other words
    (typed more and pressed Send again while the first was in flight): the second looked for the
    reference before the first committed (``unseen_client_ref``), then its insert meets the first's
    ticket on the unique reference. Neither message is dropped, and a retry of either finds its ticket."""
    ref = "ref-race"
    first, created = services.ticket_open(customer=customer, subject="", body="Where is order A-1001?", client_ref=ref)
    assert created
    second, created = services.ticket_open(
        customer=customer, subject="", body="Also: my kettle from order B-2001 arrived broken.", client_ref=ref,
        unseen_client_ref=True,  # as the view calls it after finding no ticket under the reference
    )  # fmt: skip
    assert created and second.pk != first.pk
    bodies = sorted(Message.objects.filter(ticket__customer=customer).values_list("body", flat=True))
    assert bodies == ["Also: my kettle from order B-2001 arrived broken.", "Where is order A-1001?"]
    again, created = services.ticket_open(
        customer=customer, subject="", body="Also: my kettle from order B-2001 arrived broken.", client_ref=ref,
        unseen_client_ref=True,
    )  # fmt: skip
    assert not created and again.pk == second.pk
    same, created = services.ticket_open(
        customer=customer, subject="", body="Where is order A-1001?", client_ref=ref, unseen_client_ref=True
    )
    assert not created and same.pk == first.pk
