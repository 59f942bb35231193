"""Files a customer might send, made in memory for the tests."""

from __future__ import annotations

import io

from PIL import Image

from tickets import services
from tickets.attachments import IncomingFile
from tickets.models import AuthorKind, Message, Ticket

# Where the photo was taken: it must never reach our storage.
GPS_MARKER = "Secret Street 12"


def png_bytes(width: int = 32, height: int = 24, colour: tuple[int, int, int] = (30, 120, 200)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(out, "PNG")
    return out.getvalue()


def jpeg_with_location(width: int = 40, height: int = 30) -> bytes:
    """A phone photo: EXIF with a GPS position, the camera, and "rotate 90° to view" (orientation 6)."""
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation
    exif[0x010F] = "PhoneMaker"  # camera make
    exif[0x8825] = {1: "N", 2: (52.0, 22.0, 1.5), 3: "E", 4: (4.0, 53.0, 2.0), 27: GPS_MARKER}
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 40, 40)).save(
        out, "JPEG", exif=exif.tobytes(), comment=GPS_MARKER.encode(), xmp=f"<x>{GPS_MARKER}</x>".encode()
    )
    return out.getvalue()


def pdf_bytes() -> bytes:
    """A real one-page PDF (as Pillow writes it: a cross-reference table, a trailer, startxref)."""
    out = io.BytesIO()
    Image.new("RGB", (8, 6), (250, 250, 250)).save(out, "PDF")
    return out.getvalue()


PDF_BYTES = pdf_bytes()


def post_with_files(
    ticket: Ticket, files: list[tuple[str, bytes]], *, body: str = "Here it is", client_msg_id: str = "m-files"
) -> tuple[Message, bool]:
    return services.message_post(
        ticket=ticket,
        author_kind=AuthorKind.CUSTOMER,
        author_user=ticket.customer.user,
        body=body,
        client_msg_id=client_msg_id,
        files=[IncomingFile(name=name, data=data) for name, data in files],
    )
