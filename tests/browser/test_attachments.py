"""Photos in the chat, in real browsers against the real stack: the customer attaches a photo and
sees it in their chat, a member of staff sees it in the conversation, a file of a forbidden type
is refused with a clear message and posts nothing, and another customer's request for the
photo's address answers 404."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.browser.conftest import SCREENSHOTS, Stack, sign_in
from tests.browser.test_staff_inbox import sign_in_person
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tests.tickets.files import png_bytes
from tickets import services
from tickets.models import Attachment, AuthorKind, Message

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

LOADED = "el => el.complete && el.naturalWidth > 0"


@pytest.fixture(scope="module", autouse=True)
def _media_of_this_module(tmp_path_factory) -> Iterator[None]:  # noqa: ANN001
    # Set before the stack starts (autouse comes first): the web process stores the files here.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MEDIA_ROOT", str(tmp_path_factory.mktemp("media")))
        yield


def test_a_photo_reaches_staff_a_forbidden_file_is_refused_and_strangers_get_404(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    make_support_staff("maria", first_name="Maria", last_name="Lopez")
    ticket, _ = services.ticket_open(customer=customer, subject="Cracked kettle", body="My kettle arrived cracked.")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    shopper = sign_in(browser, live, customer)
    shopper.goto(live.url(f"/tickets/{ticket.pk}/"))
    shopper.wait_for_selector("#chat-log li.msg.from-agent[data-seq]")

    # The Attach control is a real, labelled file input.
    picker = shopper.get_by_label("Attach a photo or PDF")
    picker.set_input_files([{"name": "kettle.png", "mimeType": "image/png", "buffer": png_bytes(160, 120)}])
    shopper.wait_for_selector("#chat-files-chosen li:has-text('kettle.png')")
    shopper.fill("#chat-input", "Here is a photo of the crack.")
    shopper.press("#chat-input", "Enter")

    # The customer's own bubble shows the photo, once its event is in (data-seq), and it loads.
    photo = shopper.locator("#chat-log li.msg.from-customer[data-seq]", has_text="photo of the crack").locator("img")
    photo.wait_for()
    shopper.wait_for_function(
        "() => { const i = document.querySelector('#chat-log li.msg.from-customer[data-seq] img'); "
        f"return i && ({LOADED})(i); }}"
    )
    attachment = Attachment.objects.get(message__ticket=ticket)
    assert photo.get_attribute("src") == f"/attachments/{attachment.pk}/"
    assert (attachment.original_name, attachment.content_type) == ("kettle.png", "image/png")
    assert shopper.locator("#chat-files-chosen li").count() == 0  # the choice is cleared once sent

    # After a reload the page renders the photo itself.
    shopper.reload()
    shopper.locator(f"#chat-log img[src='/attachments/{attachment.pk}/']").wait_for()
    assert shopper.locator(f"#chat-log img[src='/attachments/{attachment.pk}/']").evaluate(LOADED)

    # Staff see it in the conversation, and it loads.
    person = sign_in_person(browser, live, "maria")
    person.goto(live.url(f"/staff/tickets/{ticket.pk}/"))
    staff_photo = person.locator(f"#timeline li.msg.from-customer img[src='/attachments/{attachment.pk}/']")
    staff_photo.wait_for()
    person.wait_for_function(
        f"() => {{ const i = document.querySelector(\"#timeline img[src='/attachments/{attachment.pk}/']\"); "
        f"return i && ({LOADED})(i); }}"
    )
    person.screenshot(path=str(SCREENSHOTS / "attachment-staff.png"))

    # A text file named .png is refused: the bubble says why, and nothing is posted.
    messages_before = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER).count()
    picker.set_input_files([{"name": "notes.png", "mimeType": "image/png", "buffer": b"not a picture at all\n"}])
    shopper.fill("#chat-input", "And my notes.")
    shopper.press("#chat-input", "Enter")
    refused = shopper.locator("#chat-log li.msg.failed .msg-error")
    refused.wait_for()
    assert refused.inner_text() == (
        "Not sent: notes.png is not a file we accept. Please send a photo (JPEG, PNG or WebP) or a PDF."
    )
    shopper.screenshot(path=str(SCREENSHOTS / "attachment-refused.png"))
    assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER).count() == messages_before
    assert Attachment.objects.count() == 1

    # Another customer, signed in, asking for the photo's address: 404, as for a file that does not exist.
    stranger = sign_in(browser, live, make_customer())
    response = stranger.goto(live.url(f"/attachments/{attachment.pk}/"))
    assert response.status == 404
    assert stranger.request.get(live.url(f"/attachments/{attachment.pk}/")).status == 404

    for page in (shopper, person, stranger):
        assert page.evaluate("window.__csp") == []
