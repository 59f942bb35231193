"""A JPEG photo that carries a second picture in an MPF segment (a "multi-picture" JPEG: the depth
map or HDR gain map many phones add) is a JPEG to every browser, and Pillow names its format "MPO":
it is stored as the JPEG it is (its first picture), never a failed send."""

from __future__ import annotations

import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from PIL import Image

from tickets import services
from tickets.models import Attachment, Message

pytestmark = pytest.mark.django_db


def phone_photo_with_a_second_picture() -> bytes:
    photo = Image.new("RGB", (64, 48), (200, 40, 40))
    gain_map = Image.new("RGB", (32, 24), (90, 90, 90))
    out = io.BytesIO()
    photo.save(out, "MPO", save_all=True, append_images=[gain_map], quality=90)
    data = out.getvalue()
    assert data.startswith(b"\xff\xd8\xff")  # a JPEG, as the browser sends it
    return data


def test_a_multi_picture_jpeg_photo_is_stored_or_refused_never_a_500(customer, media):
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="My kettle arrived broken")
    client = Client(raise_request_exception=False)
    client.force_login(customer.user)

    response = client.post(
        reverse("tickets:message_create", args=[ticket.pk]),
        {
            "client_msg_id": "photo-mpo",
            "body": "Photo of the crack",
            "files": [
                SimpleUploadedFile("IMG_1234.jpg", phone_photo_with_a_second_picture(), content_type="image/jpeg")
            ],
        },
    )

    assert response.status_code != 500, (
        "sending a phone's multi-picture JPEG crashed the send endpoint (500) instead of storing the photo "
        "or refusing it with a sentence; messages stored: "
        f"{list(Message.objects.filter(ticket=ticket).values_list('body', flat=True))}"
    )
    assert response.status_code == 201, response.content[:300]
    stored = Attachment.objects.get(message__ticket=ticket)
    assert stored.content_type == "image/jpeg"
