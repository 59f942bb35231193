"""The chat on a phone, in a real browser: at 390×844 the header is small, at 390×500 (the
keyboard open) the message box and the Send button stay on the screen, and the "Enter to send"
hint is not shown on a touch screen."""

from __future__ import annotations

import pytest

from tests.browser.conftest import PAGE_TIMEOUT_MS, SCREENSHOTS, Stack, sign_in
from tests.browser.test_customer_chat import wait_for_agent_messages
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tests.tickets.files import png_bytes
from tests.workers import wait_until
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

PHONE = {"width": 390, "height": 844}
KEYBOARD_OPEN = {"width": 390, "height": 500}

# Where the parts of the chat sit on the screen, in CSS pixels.
LAYOUT = """() => {
  const box = id => { const r = document.getElementById(id).getBoundingClientRect();
                      return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, height: r.height}; };
  return {
    header: document.getElementById("chat-scroll").getBoundingClientRect().top,
    scroll: box("chat-scroll"), input: box("chat-input"), send: box("chat-send"),
    viewport: {width: window.innerWidth, height: window.innerHeight},
    pageWidth: document.documentElement.scrollWidth,
  };
}"""


@pytest.fixture
def chat_on(live: Stack, browser):  # noqa: ANN001
    """Opens a signed-in customer's chat in a browser of the given size and kind; closes them after."""
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="My kettle arrived with a dent in the lid and a scratched base", body="Hello there"
    )
    desktop = sign_in(browser, live, customer)
    signed_in = desktop.context.storage_state()
    desktop.context.close()
    contexts = []

    def open_chat(viewport: dict, *, touch: bool, resolved: bool = False):  # noqa: ANN202
        if resolved:  # answered by the agent, then resolved by a person: the rating is shown
            wait_until(
                lambda: (
                    Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).exists()
                    and not Message.objects.filter(
                        ticket=ticket, author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True
                    ).exists()
                ),
                timeout=30,
                what="the agent's answer",
            )
            ticket_services.ticket_resolve(ticket=ticket.pk, user=make_support_staff("rita", first_name="Rita"))
        context = browser.new_context(
            storage_state=signed_in, viewport=viewport, is_mobile=touch, has_touch=touch, device_scale_factor=2
        )
        context.set_default_timeout(PAGE_TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        page.goto(live.url(f"/tickets/{ticket.pk}/"))
        wait_for_agent_messages(page, 1)
        return page

    yield open_chat
    for context in contexts:
        context.close()


def inside(box: dict, viewport: dict) -> bool:
    return (
        box["top"] >= 0
        and box["left"] >= 0
        and box["bottom"] <= viewport["height"]
        and box["right"] <= viewport["width"]
    )


def test_on_a_phone_the_header_is_small_and_the_conversation_has_the_room(chat_on):  # noqa: ANN001
    page = chat_on(PHONE, touch=True)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "phone-390x844.png"))
    layout = page.evaluate(LAYOUT)

    assert layout["header"] <= PHONE["height"] / 6, layout  # the top bar and the ticket's header together
    assert layout["scroll"]["height"] >= 0.6 * PHONE["height"], layout
    assert inside(layout["input"], layout["viewport"]) and inside(layout["send"], layout["viewport"]), layout
    assert layout["pageWidth"] <= PHONE["width"], layout  # nothing pushes the page sideways
    assert not page.locator(".composer-hint").is_visible()  # "Press Enter to send" is no use on a touch keyboard


def test_with_the_keyboard_open_the_message_box_and_send_stay_on_screen(chat_on):  # noqa: ANN001
    page = chat_on(KEYBOARD_OPEN, touch=True)
    page.tap("#chat-input")
    page.screenshot(path=str(SCREENSHOTS / "phone-390x500.png"))
    layout = page.evaluate(LAYOUT)

    assert inside(layout["input"], layout["viewport"]), layout
    assert inside(layout["send"], layout["viewport"]), layout
    assert layout["header"] <= 0.2 * KEYBOARD_OPEN["height"], layout  # the header collapsed
    assert layout["scroll"]["height"] >= 0.45 * KEYBOARD_OPEN["height"], layout
    assert page.evaluate("document.scrollingElement.scrollTop") == 0  # the page itself did not scroll them into view
    assert not page.locator(".chat-head .back").is_visible() and page.locator(".chat-head h1").is_visible()

    page.fill("#chat-input", "Typed with the keyboard open")
    page.tap("#chat-send")
    page.locator("#chat-log li.msg.from-customer", has_text="Typed with the keyboard open").wait_for()
    assert inside(page.evaluate(LAYOUT)["input"], layout["viewport"])


def test_writing_on_a_resolved_ticket_with_the_keyboard_open_keeps_the_conversation_in_sight(chat_on):  # noqa: ANN001
    """A customer replies on a resolved ticket ("it is still broken") with the keyboard open: the
    rating form above the box left the conversation 68 px of 500."""
    page = chat_on(KEYBOARD_OPEN, touch=True, resolved=True)
    assert page.locator("#chat-rating").is_visible()
    page.tap("#chat-input")
    layout = page.evaluate(LAYOUT)

    assert inside(layout["input"], layout["viewport"]) and inside(layout["send"], layout["viewport"]), layout
    assert layout["scroll"]["height"] >= 0.45 * KEYBOARD_OPEN["height"], layout
    page.locator("#chat-input").blur()  # done writing: the rating is there again
    assert page.locator("#chat-rating").is_visible()


def test_a_short_window_without_touch_keeps_the_box_and_shows_the_enter_hint(chat_on):  # noqa: ANN001
    page = chat_on(KEYBOARD_OPEN, touch=False)
    layout = page.evaluate(LAYOUT)

    assert inside(layout["input"], layout["viewport"]) and inside(layout["send"], layout["viewport"]), layout
    assert page.locator(".composer-hint").is_visible()  # a keyboard with an Enter key
    assert page.locator(".composer-hint").bounding_box()["y"] + 10 <= KEYBOARD_OPEN["height"]


BOX = (
    "b => { const r = b.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; }"
)


def test_with_five_long_named_photos_chosen_the_box_send_and_each_remove_button_stay_on_screen(chat_on):  # noqa: ANN001
    """A customer picks five photos from the camera roll (long names) and writes a few lines, keyboard
    open: the list of chosen files pushed the message box and Send below the screen, left the
    conversation 18 px, and a name wider than the screen pushed its remove button off its right edge."""
    page = chat_on(KEYBOARD_OPEN, touch=True)
    page.tap("#chat-input")
    photos = [
        {"name": f"IMG_20240614_1530{n}_camera_roll_{'long_name_' * 6}{n}.png", "mimeType": "image/png",
         "buffer": png_bytes(12, 12)}
        for n in range(5)
    ]  # fmt: skip
    page.locator("#chat-files").set_input_files(photos)
    page.fill("#chat-input", "The lid is dented\n" * 6)
    page.screenshot(path=str(SCREENSHOTS / "phone-390x500-five-files.png"))
    layout = page.evaluate(LAYOUT)

    assert page.locator("#chat-files-chosen li").count() == 5
    assert inside(layout["input"], layout["viewport"]) and inside(layout["send"], layout["viewport"]), layout
    assert layout["scroll"]["height"] >= 0.25 * KEYBOARD_OPEN["height"], layout  # some conversation still in sight
    assert layout["pageWidth"] <= KEYBOARD_OPEN["width"], layout
    for photo in photos:  # each file can be scrolled to and taken back
        remove = page.get_by_role("button", name=f"Remove {photo['name']}")
        remove.scroll_into_view_if_needed()
        box = remove.evaluate(BOX)
        assert inside(box, layout["viewport"]), (photo["name"], box)
    page.get_by_role("button", name=f"Remove {photos[4]['name']}").tap()
    assert page.locator("#chat-files-chosen li").count() == 4
    assert inside(page.evaluate(LAYOUT)["send"], layout["viewport"])


@pytest.mark.parametrize("viewport", [{"width": 844, "height": 390}, {"width": 360, "height": 360}])
def test_on_a_resolved_ticket_a_short_screen_keeps_the_box_the_conversation_and_the_rating_in_reach(  # noqa: ANN001
    chat_on, viewport
):
    """A phone turned sideways (844×390), or a small one with its keyboard open (360×360), on a resolved
    ticket: the rating form took the whole card, the conversation got 18 px, and the message box,
    Send and the rating's own Send button were cut off below the card, out of reach."""
    page = chat_on(viewport, touch=True, resolved=True)
    page.screenshot(path=str(SCREENSHOTS / f"phone-{viewport['width']}x{viewport['height']}-resolved.png"))
    layout = page.evaluate(LAYOUT)

    assert page.locator("#chat-rating").is_visible()
    assert inside(layout["input"], layout["viewport"]) and inside(layout["send"], layout["viewport"]), layout
    assert layout["scroll"]["height"] >= 0.2 * viewport["height"], layout
    assert layout["pageWidth"] <= viewport["width"], layout
    send_rating = page.get_by_role("button", name="Send rating")
    send_rating.scroll_into_view_if_needed()
    assert inside(send_rating.evaluate(BOX), layout["viewport"])
    page.locator("#chat-rating label", has_text="4").tap()
    send_rating.tap()
    page.wait_for_url("**#chat-rating")
    page.locator("#chat-rating legend", has_text="You rated this conversation 4 out of 5").wait_for()


def test_five_photos_too_large_are_said_so_without_pushing_the_box_off_screen(chat_on, tmp_path):  # noqa: ANN001
    """Five camera photos over the size limit, keyboard open: each one's refusal ("… is 10.1 MB; a file
    can be at most 10 MB.") is said, with its whole name (a long one ran past the screen's edge, cut
    off), and the box and Send stay on the screen."""
    page = chat_on(KEYBOARD_OPEN, touch=True)
    page.tap("#chat-input")
    photos = []
    for n in range(5):  # over ATTACHMENT_MAX_BYTES (checked in the browser first), as a phone's photo can be
        photo = tmp_path / f"IMG_20240614_1530{n}_camera_roll_{'long_name_' * 3}{n}.jpg"
        with photo.open("wb") as out:
            out.truncate(10 * 1024 * 1024 + 100_000)
        photos.append(photo)
    page.locator("#chat-files").set_input_files(photos)
    error = page.locator("#chat-files-error")
    error.wait_for()
    page.screenshot(path=str(SCREENSHOTS / "phone-390x500-five-too-large.png"))
    layout = page.evaluate(LAYOUT)

    assert page.locator("#chat-files-chosen li").count() == 0
    assert all(photo.name in error.inner_text() for photo in photos)
    assert inside(layout["input"], layout["viewport"]) and inside(layout["send"], layout["viewport"]), layout
    assert layout["scroll"]["height"] >= 0.2 * KEYBOARD_OPEN["height"], layout
    # Each name can be read whole: none runs past the screen's edge, cut off.
    assert error.evaluate("e => e.scrollWidth <= e.clientWidth"), error.evaluate(BOX)
    assert error.evaluate(BOX)["right"] <= KEYBOARD_OPEN["width"]
