"""The agent is told what the customer attached (name, type, size); it does not see the file."""

from __future__ import annotations

import pytest

from agents.conversation import request_of
from agents.models import ModelStep, RunStatus
from agents.runner import advance
from tests.conftest import make_customer, make_order
from tests.tickets.files import PDF_BYTES, jpeg_with_location, post_with_files
from tickets import services as ticket_services
from tickets.attachments import size_words
from tickets.models import Attachment, AuthorKind, Message

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_model_is_told_of_each_attached_file_and_still_answers(media):  # noqa: ANN001
    customer = make_customer()
    make_order(customer, number="A-7101")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Cracked", body="My kettle arrived cracked.")
    post_with_files(
        ticket,
        [("kettle.jpg", jpeg_with_location()), ("receipt.pdf", PDF_BYTES)],
        body="Photo and receipt for order A-7101 attached.",
    )
    photo, receipt = Attachment.objects.order_by("position")

    outcome = advance(ticket.pk)

    first_step = ModelStep.objects.filter(ticket=ticket).order_by("index").first()
    said = [m["content"] for m in request_of(first_step) if m["role"] == "user"]
    assert said[-1] == (
        "Photo and receipt for order A-7101 attached.\n"
        f"[attached: kettle.jpg (image/jpeg, {size_words(photo.size)})]\n"
        f"[attached: receipt.pdf (application/pdf, {size_words(receipt.size)})]"
    )
    assert said[0] == "My kettle arrived cracked."  # a message without files reads as before
    # The offline model reads the latest customer messages: the attachment lines do not get in its way.
    assert outcome.state == RunStatus.COMPLETED
    reply = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).latest("id").body
    assert "A-7101" in reply
