"""A picture with see-through parts (a logo, a screenshot cut out, a sticker) reaches staff as the
customer sent it: re-encoding strips metadata, never the transparency, which is part of the picture.

PNG keeps transparency in three ways: an alpha channel (RGBA, LA), or a ``tRNS`` chunk that marks
palette entries (P) or one exact colour (L, RGB) as see-through. WebP has an alpha channel.
"""

from __future__ import annotations

import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from PIL import Image

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import Attachment

pytestmark = pytest.mark.django_db


def _checkerboard(mode: str) -> Image.Image:
    """A 6×4 picture whose left half is see-through, drawn in ``mode``."""
    image = Image.new("RGBA", (6, 4), (200, 30, 30, 255))
    for x in range(3):
        for y in range(4):
            image.putpixel((x, y), (0, 0, 0, 0) if (x + y) % 2 else (10, 20, 30, 128))
    return image if mode == "RGBA" else image.convert(mode)


def _encoded(fmt: str, image: Image.Image, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def _palette_with_alpha() -> bytes:
    """A palette PNG whose entries carry their own alpha (tRNS with one byte per entry), as image
    editors write small icons."""
    image = Image.new("P", (6, 4), 0)
    image.putpalette([255, 0, 0, 0, 255, 0, 0, 0, 255])
    for x in range(6):
        image.putpixel((x, 1), 1)
        image.putpixel((x, 2), 2)
    return _encoded("PNG", image, transparency=bytes([0, 128, 255]))


def _grey_with_key() -> bytes:
    image = Image.new("L", (6, 4), 90)
    image.putpixel((0, 0), 7)
    return _encoded("PNG", image, transparency=7)  # every pixel of value 7 is see-through


def _rgb_with_key() -> bytes:
    image = Image.new("RGB", (6, 4), (40, 50, 60))
    image.putpixel((1, 1), (1, 2, 3))
    return _encoded("PNG", image, transparency=(1, 2, 3))  # every pixel of this colour is see-through


PICTURES = {
    "png-rgba": lambda: _encoded("PNG", _checkerboard("RGBA")),
    "png-grey-alpha": lambda: _encoded("PNG", _checkerboard("LA")),
    "png-palette-alpha": _palette_with_alpha,
    "png-grey-key": _grey_with_key,
    "png-rgb-key": _rgb_with_key,
    "webp-alpha": lambda: _encoded("WEBP", _checkerboard("RGBA"), lossless=True),
}


def _as_seen(data: bytes) -> list[tuple[int, int, int, int]]:
    """The pixels a browser draws: colour and opacity of each."""
    with Image.open(io.BytesIO(data)) as image:
        return list(image.convert("RGBA").getdata())


def _see_through(pixels: list[tuple[int, int, int, int]]) -> list[int]:
    return [alpha for *_, alpha in pixels]


@pytest.mark.parametrize("kind", list(PICTURES))
def test_staff_see_the_see_through_parts_of_a_picture_the_customer_sent(kind, media):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = services.ticket_open(customer=customer, subject="Sticker", body="The print lost its cut-out.")
    sent = PICTURES[kind]()
    assert 0 in _see_through(_as_seen(sent)) or 128 in _see_through(_as_seen(sent))  # it has see-through parts

    shop = Client()
    shop.force_login(customer.user)
    name = "sticker." + ("webp" if kind.startswith("webp") else "png")
    posted = shop.post(
        reverse("tickets:message_create", args=[ticket.pk]),
        data={"client_msg_id": "sticker-1", "body": "Like this", "files": [SimpleUploadedFile(name, sent)]},
    )
    assert posted.status_code == 201, posted.content
    attachment = Attachment.objects.get(message_id=posted.json()["message"]["id"])

    staff = Client()
    staff.force_login(make_support_staff("lena"))
    served = staff.get(f"/attachments/{attachment.pk}/")
    assert served.status_code == 200
    shown = b"".join(served.streaming_content)

    assert _see_through(_as_seen(shown)) == _see_through(_as_seen(sent)), (
        f"the {kind} picture reaches staff with its see-through parts filled in"
    )
    if kind.startswith("png"):  # lossless: every pixel as sent (WebP is encoded again with loss)
        assert _as_seen(shown) == _as_seen(sent)
