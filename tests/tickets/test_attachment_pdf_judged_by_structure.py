"""A PDF is recognised by its structure, not by its first five bytes: a page, a picture or a script that
begins with ``%PDF-`` is not stored as a PDF (nor offered to staff or the customer as one)."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from tests.conftest import stored_files
from tests.tickets.files import PDF_BYTES, post_with_files
from tickets import services
from tickets.attachments import AttachmentRefused
from tickets.models import Attachment, Message, Ticket

pytestmark = pytest.mark.django_db


@pytest.fixture
def ticket(customer) -> Ticket:  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=customer, subject="Broken kettle", body="It arrived cracked.")
    return ticket


def xref_stream_pdf() -> bytes:
    """A PDF 1.5 whose cross-reference section is a stream object (as most writers make them now),
    with CRLF line ends and padding after its end, as some scanners leave."""
    head = b"%PDF-1.5\r\n%\xe2\xe3\xcf\xd3\r\n"
    body = (
        b"1 0 obj\r\n<< /Type /Catalog /Pages 2 0 R >>\r\nendobj\r\n"
        b"2 0 obj\r\n<< /Type /Pages /Kids [] /Count 0 >>\r\nendobj\r\n"
    )
    xref_at = len(head) + len(body)
    xref = (
        b"3 0 obj\r\n<< /Type /XRef /Size 4 /Root 1 0 R /W [1 2 1] /Length 4 >>\r\n"
        b"stream\r\n\x00\x00\x00\xff\r\nendstream\r\nendobj\r\n"
    )
    return head + body + xref + b"startxref\r\n" + str(xref_at).encode() + b"\r\n%%EOF\r\n\x00\x00"


NOT_PDFS = {
    "html-after-the-header": b"%PDF-1.4\n<!DOCTYPE html><html><script>alert(document.cookie)</script></html>\n",
    "svg-after-the-header": b'%PDF-1.7\n<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
    "script-after-the-header": b"%PDF-\nfetch('/staff/').then(r => r.text()).then(t => navigator.sendBeacon('/', t))",
    "the-header-alone": b"%PDF-",
    "an-end-that-points-nowhere": b"%PDF-1.4\n<html>hi</html>\nstartxref\n999999\n%%EOF\n",
    "an-end-that-points-at-markup": b"%PDF-1.4\n<html>hi</html>\nstartxref\n9\n%%EOF\n",
    "cut-off-halfway": PDF_BYTES[: len(PDF_BYTES) // 2],
    "html-after-the-end": PDF_BYTES + b"<html><script>alert(1)</script></html>\n",
}


@pytest.mark.parametrize("data", list(NOT_PDFS.values()), ids=list(NOT_PDFS))
def test_a_file_that_only_begins_like_a_pdf_is_refused_and_nothing_is_stored(ticket, media, data):  # noqa: ANN001
    before = Message.objects.count()

    with pytest.raises(AttachmentRefused) as refused:
        post_with_files(ticket, [("invoice.pdf", data)])

    assert refused.value.code == "damaged", refused.value.messages
    assert refused.value.messages == ["invoice.pdf looks damaged and could not be opened."]
    assert Message.objects.count() == before
    assert not Attachment.objects.exists()
    assert stored_files(media) == []


@pytest.mark.parametrize(
    "data",
    [PDF_BYTES, xref_stream_pdf(), PDF_BYTES + b"\n%%EOF\n"],
    ids=["xref-table-written-by-pillow", "xref-stream-crlf-padded", "its-end-written-twice"],
)
def test_a_real_pdf_is_stored_as_it_came(ticket, media, data):  # noqa: ANN001
    message, _ = post_with_files(ticket, [("invoice.pdf", data)])

    attachment = message.attachments.get()
    assert attachment.content_type == "application/pdf"
    assert (media / attachment.storage_name).read_bytes() == data


def test_a_page_sent_as_a_pdf_over_http_is_refused_whatever_type_the_browser_declared(client, customer, ticket, media):  # noqa: ANN001
    client.force_login(customer.user)
    page = NOT_PDFS["html-after-the-header"]

    response = client.post(
        reverse("tickets:message_create", args=[ticket.pk]),
        data={
            "client_msg_id": "pdf-1",
            "body": "My invoice",
            "files": [SimpleUploadedFile("invoice.pdf", page, content_type="application/pdf")],
        },
    )

    assert response.status_code == 400
    assert response.json()["error"] == "invoice.pdf looks damaged and could not be opened."
    assert not Message.objects.filter(client_msg_id="pdf-1").exists()
    assert stored_files(media) == []


def test_a_stored_pdf_is_served_as_a_download_the_browser_may_not_sniff(client, customer, ticket, media):  # noqa: ANN001
    client.force_login(customer.user)
    message, _ = post_with_files(ticket, [("invoice.pdf", PDF_BYTES)])

    response = client.get(f"/attachments/{message.attachments.get().pk}/")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/pdf"
    assert response["Content-Disposition"] == 'attachment; filename="invoice.pdf"'
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in response["Content-Security-Policy"]
