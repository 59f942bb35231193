"""Photos in the chat, in real browsers against the real stack: the customer attaches a photo and
sees it in their chat, a member of staff sees it in the conversation, a file of a forbidden type
is refused with a clear message and posts nothing, and another customer's request for the
photo's address answers 404."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.contrib.sessions.models import Session

from tests.browser.conftest import PASSWORD, SCREENSHOTS, Stack, sign_in
from tests.browser.test_staff_inbox import sign_in_person
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tests.tickets.files import png_bytes
from tickets import services
from tickets.models import Attachment, AuthorKind, Message

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

LOADED = "el => el.complete && el.naturalWidth > 0"


def _no_copy_kept_within(page, *, seconds: float) -> None:  # noqa: ANN001
    deadline = time.monotonic() + seconds
    while page.evaluate(FILES_KEPT_IN_THE_BROWSER) and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert page.evaluate(FILES_KEPT_IN_THE_BROWSER) == 0, "the browser still keeps a copy of the sent files"


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


def _chat_with_a_photo_chosen(live: Stack, browser):  # noqa: ANN001, ANN202
    customer = make_customer()
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="My kettle arrived cracked.")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    page.wait_for_selector("#chat-log li.msg.from-agent[data-seq]")
    page.get_by_label("Attach a photo or PDF").set_input_files(
        [{"name": "kettle.png", "mimeType": "image/png", "buffer": png_bytes(64, 48)}]
    )
    page.wait_for_selector("#chat-files-chosen li:has-text('kettle.png')")
    return page, ticket


def test_a_message_too_long_to_send_keeps_the_photo_chosen_for_it(live: Stack, browser):  # noqa: ANN001
    """Text the page puts back in the box itself (two messages refused while signed out come back
    joined) is not held to the box's maxlength: refused as too long, it must not lose the photo."""
    page, ticket = _chat_with_a_photo_chosen(live, browser)
    too_long = "My kettle arrived cracked. " * 160  # over the 4000 characters a message may have
    page.evaluate("text => { document.getElementById('chat-input').value = text; }", too_long)
    page.press("#chat-input", "Enter")
    page.wait_for_function("() => document.getElementById('chat-note').textContent.includes('at most')")

    assert page.input_value("#chat-input") == too_long
    assert page.locator("#chat-files-chosen li", has_text="kettle.png").count() == 1, "the chosen photo was lost"
    # Shortened, it goes with the photo.
    page.fill("#chat-input", "My kettle arrived cracked.")
    page.press("#chat-input", "Enter")
    page.locator("#chat-log li.msg.from-customer[data-seq]", has_text="arrived cracked").locator("img").wait_for()
    assert Attachment.objects.filter(message__ticket=ticket, original_name="kettle.png").count() == 1
    page.context.close()


def test_a_message_with_a_photo_refused_for_its_text_says_why(live: Stack, browser):  # noqa: ANN001
    """Sent as a form (it carries a file), a refusal of the text came back as plain text, which the
    page could not read: it said only "please try again", which cannot help."""
    page, ticket = _chat_with_a_photo_chosen(live, browser)
    page.evaluate("() => { document.getElementById('chat-input').value = 'cracked\\u0000kettle'; }")
    page.press("#chat-input", "Enter")
    error = page.locator("#chat-log li.msg.failed .msg-error")
    error.wait_for(timeout=15_000)

    assert "NUL" in error.inner_text(), error.inner_text()
    # Nothing posted: the ticket holds only the message that opened it, and no file.
    assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER).count() == 1
    assert not Attachment.objects.filter(message__ticket=ticket).exists()
    page.context.close()


def test_a_message_with_a_photo_refused_because_the_customer_was_signed_out_comes_back_with_it(live: Stack, browser):  # noqa: ANN001
    """Signed out while sending a message with a photo: after signing in again, the text came back
    in the box and the photo was gone. Both come back, and go out together."""
    page, ticket = _chat_with_a_photo_chosen(live, browser)
    Session.objects.all().delete()  # the session ended on the server
    page.fill("#chat-input", "Here is the crack.")
    page.press("#chat-input", "Enter")
    failure = page.locator("#chat-log li.msg.from-customer.failed .msg-error")
    failure.get_by_text("and your message and its files will be back in the box.").wait_for()

    failure.get_by_role("link", name="Sign in again").click()
    page.fill("#id_username", ticket.customer.user.username)
    page.fill("#id_password", PASSWORD)
    page.click("main form button[type=submit]")
    page.wait_for_url(live.url(f"/tickets/{ticket.pk}/"))

    assert page.input_value("#chat-input") == "Here is the crack."
    page.wait_for_selector("#chat-files-chosen li:has-text('kettle.png')")
    assert "back in the box with its file" in page.inner_text("#chat-note")
    page.press("#chat-input", "Enter")
    page.locator("#chat-log li.msg.from-customer[data-seq]", has_text="Here is the crack").locator("img").wait_for()
    assert Attachment.objects.filter(message__ticket=ticket, original_name="kettle.png").count() == 1
    # Taken out as it came back: the browser keeps no copy once the message is stored (the page
    # deletes it then; a reload in that very moment could stop the deletion), and a reload does not
    # choose it again.
    _no_copy_kept_within(page, seconds=10)
    page.reload()
    page.wait_for_selector("#chat-log li.msg.from-agent[data-seq]")
    assert page.locator("#chat-files-chosen li").count() == 0
    assert page.evaluate(FILES_KEPT_IN_THE_BROWSER) == 0
    page.context.close()


# How many messages' files the page keeps in IndexedDB.
FILES_KEPT_IN_THE_BROWSER = """() => new Promise(done => {
  const open = indexedDB.open("chat-files", 1);
  open.onsuccess = () => {
    const count = open.result.transaction("unsent").objectStore("unsent").count();
    count.onsuccess = () => done(count.result);
  };
})"""


def test_a_message_with_a_photo_that_failed_to_send_goes_with_its_photo_after_a_reload(live: Stack, browser):  # noqa: ANN001
    """A message with a photo failed to send (the network), and the customer reloaded: the page
    sent the kept message again by itself, as text only, and the photo was lost without a word."""
    page, ticket = _chat_with_a_photo_chosen(live, browser)
    page.route("**/messages", lambda route: route.abort("connectionreset"))
    text = "Here is the damage on the box."
    page.fill("#chat-input", text)
    page.press("#chat-input", "Enter")
    page.locator("#chat-log li.msg.from-customer.failed .msg-error").wait_for(timeout=15_000)
    page.unroute("**/messages")

    page.reload()
    page.locator("#chat-log li.msg.from-customer[data-seq]", has_text=text).locator("img").wait_for()
    (message,) = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body=text)
    assert list(Attachment.objects.filter(message=message).values_list("original_name", flat=True)) == ["kettle.png"]
    page.reload()  # stored: nothing is kept for it any more, nothing sent twice
    page.wait_for_selector("#chat-log li.msg.from-agent[data-seq]")
    page.wait_for_timeout(1000)
    assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body=text).count() == 1
    assert page.evaluate(FILES_KEPT_IN_THE_BROWSER) == 0
    page.context.close()


def test_a_message_refused_for_one_file_comes_back_ready_to_send_without_it(live: Stack, browser):  # noqa: ANN001
    """A message with a good photo and a file we do not accept was refused with the reason, and
    the box was emptied and the photo gone: the text lived on only in the "Not sent" bubble. Now the
    text and the good photo are ready to send again; the file refused is left out."""
    page, ticket = _chat_with_a_photo_chosen(live, browser)
    page.get_by_label("Attach a photo or PDF").set_input_files(
        [{"name": "notes.png", "mimeType": "image/png", "buffer": b"not a picture at all\n"}]
    )
    page.wait_for_selector("#chat-files-chosen li:has-text('notes.png')")
    text = "The kettle and my notes about it."
    page.fill("#chat-input", text)
    page.press("#chat-input", "Enter")
    refused = page.locator("#chat-log li.msg.failed .msg-error")
    refused.wait_for()
    assert refused.inner_text().startswith("Not sent: notes.png is not a file we accept.")

    assert page.input_value("#chat-input") == text
    assert page.locator("#chat-files-chosen li").all_inner_texts()[0].startswith("kettle.png")
    assert page.locator("#chat-files-chosen li").count() == 1
    page.press("#chat-input", "Enter")
    page.locator("#chat-log li.msg.from-customer[data-seq]", has_text=text).locator("img").wait_for()
    assert list(
        Attachment.objects.filter(message__ticket=ticket, message__body=text).values_list("original_name", flat=True)
    ) == ["kettle.png"]
    page.context.close()


# Holds every send with files 2.5 s before it leaves, as a slow upload does.
SLOW_UPLOADS = """() => {
  const fetch = window.fetch.bind(window);
  window.fetch = (url, init) => init && init.body instanceof FormData
    ? new Promise(done => setTimeout(done, 2500)).then(() => fetch(url, init))
    : fetch(url, init);
}"""


def test_a_photo_then_a_quick_text_are_kept_in_the_order_written(live: Stack, browser):  # noqa: ANN001
    """A photo on a slow upload, then a short text: the text overtook the photo, so the customer's
    messages were stored, shown and read by the agent the wrong way round."""
    page, ticket = _chat_with_a_photo_chosen(live, browser)
    page.evaluate(SLOW_UPLOADS)
    first, second = "Here is the crack.", "And the box was wet too."
    page.fill("#chat-input", first)
    page.press("#chat-input", "Enter")
    page.fill("#chat-input", second)
    page.press("#chat-input", "Enter")
    for text in (first, second):
        page.locator("#chat-log li.msg.from-customer[data-seq]", has_text=text).wait_for()

    stored = list(
        Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body__in=[first, second])
        .order_by("id")
        .values_list("body", flat=True)
    )
    shown = page.eval_on_selector_all(
        "#chat-log li.msg.from-customer .bubble", "bubbles => bubbles.map(b => b.textContent)"
    )
    assert stored == [first, second]
    assert shown[-2:] == [first, second]
    page.context.close()


def test_files_kept_in_the_browser_past_their_hour_are_taken_out_when_a_chat_opens(live: Stack, browser):  # noqa: ANN001
    """Files kept for a send a tab never came back for would otherwise stay in the browser."""
    page, _ = _chat_with_a_photo_chosen(live, browser)
    page.evaluate(
        """() => new Promise(done => {
          const open = indexedDB.open("chat-files", 1);
          open.onsuccess = () => {
            const tx = open.result.transaction("unsent", "readwrite");
            tx.objectStore("unsent").put({ at: Date.now() - 2 * 3600 * 1000, files: [] }, "message-left-behind");
            tx.oncomplete = () => done();
          };
        })"""
    )
    assert page.evaluate(FILES_KEPT_IN_THE_BROWSER) == 1
    page.reload()
    page.wait_for_selector("#chat-log li.msg.from-agent[data-seq]")
    page.wait_for_timeout(500)  # the page's sweep of the store, as it opened
    assert page.evaluate(FILES_KEPT_IN_THE_BROWSER) == 0
    page.context.close()


@pytest.mark.parametrize(
    ("good", "bad"),
    [
        # A phone's browser names every photo it hands over "image.jpg".
        ("image.jpg", "image.jpg"),
        # A name the server tells in another form: decomposed accents (as macOS writes them), a leading dot.
        ("kettle.png", "cafe\u0301 receipt.png"),
        ("kettle.png", ".receipt.png"),
    ],
)
def test_a_message_refused_for_one_file_gives_back_the_others_by_place_not_by_name(live: Stack, browser, good, bad):  # noqa: ANN001, E501
    """The refused file was found again by its name as the refusal began: a good photo named as the
    refused one (a phone names them all "image.jpg") was dropped with it, and a refused file whose name
    the server tells otherwise (cleaned, composed) was chosen again, to be refused at every send."""
    customer = make_customer()
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="My kettle arrived cracked.")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    page.wait_for_selector("#chat-log li.msg.from-agent[data-seq]")
    page.get_by_label("Attach a photo or PDF").set_input_files(
        [
            {"name": good, "mimeType": "image/png", "buffer": png_bytes(64, 48)},
            {"name": bad, "mimeType": "image/png", "buffer": b"not a picture at all\n"},
        ]
    )
    page.wait_for_function("() => document.querySelectorAll('#chat-files-chosen li').length === 2")
    text = "The kettle and my receipt."
    page.fill("#chat-input", text)
    page.press("#chat-input", "Enter")
    page.locator("#chat-log li.msg.failed .msg-error").wait_for()

    assert page.input_value("#chat-input") == text
    chosen = page.locator("#chat-files-chosen li .chosen-name").all_inner_texts()
    assert len(chosen) == 1, f"chosen again after the refusal: {chosen}"
    assert chosen[0].startswith(good + " (")
    page.press("#chat-input", "Enter")
    page.locator("#chat-log li.msg.from-customer[data-seq]", has_text=text).locator("img").wait_for()
    assert list(
        Attachment.objects.filter(message__ticket=ticket, message__body=text).values_list("original_name", flat=True)
    ) == [good]
    page.context.close()
