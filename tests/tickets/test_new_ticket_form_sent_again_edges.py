"""The new-ticket form sent again under a reference it was already used with: refused with a sentence
when its message cannot be taken, and a racing double submit with other words keeps both messages.

README / DESIGN: a customer's message is never lost, and plausible input never gives a failed
request (a 500): a form with a problem in it comes back with a sentence, the words kept.
"""

from __future__ import annotations

import threading

import pytest
from django.db import close_old_connections, connection, transaction
from django.test import Client
from django.urls import reverse

from tickets import services
from tickets.models import Message, Ticket


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


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_a_double_submit_with_other_words_racing_the_first_keeps_both_messages(customer):  # noqa: ANN001
    """Two sends of one form (its hidden reference) arrive together, the second with other words
    (typed more and pressed Send again while the first was in flight): neither is dropped."""
    ref = "ref-race"
    inserted, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first_send() -> None:
        try:
            with transaction.atomic():
                services.ticket_open(customer=customer, subject="", body="Where is order A-1001?", client_ref=ref)
                inserted.set()
                release.wait(20)  # the first request's transaction is still committing
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            inserted.set()
        finally:
            connection.close()

    t = threading.Thread(target=first_send)
    t.start()
    assert inserted.wait(20)

    result: dict[str, object] = {}

    def second_send() -> None:
        try:
            c = Client(raise_request_exception=False)
            c.force_login(customer.user)
            result["response"] = c.post(
                reverse("tickets:new"),
                {"subject": "", "body": "Also: my kettle from order B-2001 arrived broken.", "client_ref": ref},
            )
        finally:
            close_old_connections()
            connection.close()

    s = threading.Thread(target=second_send)
    s.start()
    s.join(2)  # it looked for the reference (not committed yet) and now waits on the insert
    release.set()
    t.join(20)
    s.join(20)
    assert not errors, errors
    response = result["response"]
    bodies = sorted(Message.objects.filter(ticket__customer=customer).values_list("body", flat=True))
    accepted = response.status_code in (302, 303)
    assert not accepted or "Also: my kettle from order B-2001 arrived broken." in bodies, (
        f"the second send was accepted ({response.status_code} -> {response.get('Location')}) but its words were "
        f"never stored (a message lost): messages on the customer's tickets {bodies}, tickets "
        f"{list(Ticket.objects.filter(customer=customer).values_list('pk', 'client_ref'))}"
    )
