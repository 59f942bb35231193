"""A file chosen for a message, then moved or deleted on the computer before Send (the browser can no
longer read it): the message could not be sent at all. Every try failed as if the network had, the
words stayed "Not sent" and nothing said why. Now the words go without that file, and the page says
which file could not be read; a message of that file alone is not sent, and says so."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.browser.conftest import Stack, sign_in
from tests.conftest import make_customer
from tests.tickets.files import png_bytes
from tickets import services
from tickets.models import Attachment, AuthorKind, Message

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


@pytest.fixture(scope="module", autouse=True)
def _media_of_this_module(tmp_path_factory) -> Iterator[None]:  # noqa: ANN001
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MEDIA_ROOT", str(tmp_path_factory.mktemp("media")))
        yield


def _chat_with_files_chosen_from_disk(live: Stack, browser, *paths):  # noqa: ANN001, ANN202
    customer = make_customer()
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="My kettle arrived cracked.")
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    page.wait_for_selector("#chat-log li.msg.from-agent[data-seq]")
    # Chosen from disk, as a customer picks them: the browser reads the file when it sends it.
    page.get_by_label("Attach a photo or PDF").set_input_files([str(path) for path in paths])
    for path in paths:
        page.wait_for_selector(f"#chat-files-chosen li:has-text('{path.name}')")
    return page, ticket


def test_words_sent_with_a_photo_deleted_before_send_go_without_it_and_the_page_says_which(live, browser, tmp_path):  # noqa: ANN001
    gone, kept = tmp_path / "crack.png", tmp_path / "box.png"
    gone.write_bytes(png_bytes(64, 48))
    kept.write_bytes(png_bytes(48, 64))
    page, ticket = _chat_with_files_chosen_from_disk(live, browser, gone, kept)
    gone.unlink()  # moved away before Send

    text = "Here is the crack and the box."
    page.fill("#chat-input", text)
    page.press("#chat-input", "Enter")
    page.wait_for_function(
        "() => document.getElementById('chat-files-error').textContent.includes('crack.png')", timeout=20_000
    )
    page.locator("#chat-log li.msg.from-customer[data-seq]", has_text=text).locator("img").wait_for(timeout=20_000)

    (message,) = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body=text)
    assert list(Attachment.objects.filter(message=message).values_list("original_name", flat=True)) == ["box.png"]
    note = page.inner_text("#chat-files-error")
    assert "crack.png could not be read" in note and "sent without it" in note, note
    assert page.locator("#chat-log li.msg.failed").count() == 0
    page.context.close()


def test_a_photo_alone_deleted_before_send_is_not_sent_and_the_page_says_why(live, browser, tmp_path):  # noqa: ANN001
    gone = tmp_path / "crack.png"
    gone.write_bytes(png_bytes(64, 48))
    page, ticket = _chat_with_files_chosen_from_disk(live, browser, gone)
    gone.unlink()

    page.press("#chat-input", "Enter")
    refused = page.locator("#chat-log li.msg.failed .msg-error")
    refused.wait_for(timeout=20_000)

    assert "crack.png could not be read" in refused.inner_text(), refused.inner_text()
    assert page.locator("#chat-log li.msg.failed .msg-retry").count() == 0  # trying again cannot help
    page.wait_for_timeout(1000)
    assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER).count() == 1
    page.context.close()


# The browser's copy of the files of unsent messages is gone (IndexedDB cleared, off in a private
# window, or its hour over) when the page is reloaded.
FORGET_THE_KEPT_FILES = """() => new Promise(done => {
  const deleting = indexedDB.deleteDatabase("chat-files");
  deleting.onsuccess = deleting.onerror = deleting.onblocked = () => done();
})"""


@pytest.mark.parametrize("words", ["", "Here is the crack."])
def test_a_message_whose_files_were_not_kept_over_a_reload_says_so_instead_of_going_without_them(
    live,  # noqa: ANN001
    browser,  # noqa: ANN001
    tmp_path,  # noqa: ANN001
    words,  # noqa: ANN001
):
    """It was sent after the reload as if it had never had files: a photo alone went as a text
    reading "crack.png", and words went without their photo, without a word either way."""
    photo = tmp_path / "crack.png"
    photo.write_bytes(png_bytes(64, 48))
    page, ticket = _chat_with_files_chosen_from_disk(live, browser, photo)
    page.route("**/messages", lambda route: route.abort("connectionreset"))
    if words:
        page.fill("#chat-input", words)
    page.press("#chat-input", "Enter")
    page.locator("#chat-log li.msg.from-customer.failed .msg-error").wait_for(timeout=20_000)
    page.unroute("**/messages")
    page.evaluate(FORGET_THE_KEPT_FILES)

    page.reload()
    page.wait_for_selector("#chat-log li.msg.from-agent[data-seq]")
    if words:
        page.locator("#chat-log li.msg.from-customer[data-seq]", has_text=words).wait_for(timeout=20_000)
        note = page.inner_text("#chat-files-error")
        assert "crack.png could not be kept" in note and "sent without it" in note, note
        assert list(
            Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER).values_list("body", flat=True)
        ) == ["My kettle arrived cracked.", words]
    else:
        refused = page.locator("#chat-log li.msg.failed .msg-error")
        refused.wait_for(timeout=20_000)
        assert "crack.png could not be kept" in refused.inner_text(), refused.inner_text()
        page.wait_for_timeout(1000)
        assert list(
            Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER).values_list("body", flat=True)
        ) == ["My kettle arrived cracked."], "a photo alone went as a message of its name"
    assert not Attachment.objects.filter(message__ticket=ticket).exists()
    page.context.close()
