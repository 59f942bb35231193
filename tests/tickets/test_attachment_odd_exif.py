"""A phone photo whose EXIF says "rotate 90°" (orientation 6) and carries one tag written with the
wrong type (XResolution stored as text, a bug of some cameras and editing apps) is stored upright
(the turn read from the EXIF, which is not rewritten), never a failed send."""

from __future__ import annotations

import io
import struct

import pytest
from django.test import Client
from django.urls import reverse
from PIL import Image

from tickets import services
from tickets.models import Message

pytestmark = pytest.mark.django_db


def _exif(entries: list[tuple[int, int, int, bytes]]) -> bytes:
    """A little-endian EXIF block with one IFD of these (tag, type, count, value) entries."""
    header = b"II*\x00" + struct.pack("<I", 8) + struct.pack("<H", len(entries))
    extra, base = b"", 8 + 2 + 12 * len(entries) + 4
    for tag, typ, count, value in entries:
        if len(value) <= 4:
            header += struct.pack("<HHI", tag, typ, count) + value.ljust(4, b"\0")
        else:
            header += struct.pack("<HHII", tag, typ, count, base + len(extra))
            extra += value
    return b"Exif\x00\x00" + header + b"\0\0\0\0" + extra


def photo_with_text_resolution() -> bytes:
    exif = _exif([
        (0x0112, 3, 1, struct.pack("<H", 6)),  # Orientation: rotate 90° to view (SHORT)
        (0x011A, 2, 8, b"72/1\x00\x00\x00\x00"),  # XResolution written as ASCII instead of RATIONAL
    ])  # fmt: skip
    out = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 40, 40)).save(out, "JPEG", exif=exif, quality=90)
    return out.getvalue()


def test_a_photo_with_a_mistyped_exif_tag_is_stored_upright(customer, media):
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="My kettle arrived broken")
    client = Client(raise_request_exception=False)
    client.force_login(customer.user)

    from django.core.files.uploadedfile import SimpleUploadedFile

    response = client.post(
        reverse("tickets:message_create", args=[ticket.pk]),
        {
            "client_msg_id": "photo-1",
            "body": "Here is a photo of the damage",
            "files": [SimpleUploadedFile("IMG_0042.jpg", photo_with_text_resolution(), content_type="image/jpeg")],
        },
    )

    assert response.status_code != 500, (
        "sending a JPEG photo whose EXIF has orientation 6 and a mistyped tag crashed the send endpoint "
        f"(500) instead of storing it or refusing it with a sentence; stored messages: "
        f"{list(Message.objects.filter(ticket=ticket).values_list('body', flat=True))}"
    )
    assert response.status_code == 201, response.content[:300]
    stored = Message.objects.get(ticket=ticket, client_msg_id="photo-1").attachments.get()
    with Image.open(media / stored.storage_name) as image:
        assert image.size == (30, 40), "stored as it was taken, not turned upright"
        assert not image.getexif(), "the photo's metadata must not be kept"
