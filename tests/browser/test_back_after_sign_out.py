"""On a shared computer, a customer signs out and walks away; the next person presses Back. The chat
came back from the browser's cache, every message of it; now the page is asked for again, and the
sign-in page answers."""

from __future__ import annotations

import contextlib

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, Stack, sign_in
from tests.browser.test_customer_chat import wait_for_agent_messages
from tests.conftest import make_customer
from tickets import services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def browser_as_shipped(browser):  # noqa: ANN001, ANN201
    """Chromium with its back/forward cache, which browsers ship with and Playwright turns off: Back
    shows the page as it was left, from memory, unless the page said no-store."""
    chromium = browser.browser_type.launch(
        executable_path=CHROMIUM,
        args=CHROMIUM_ARGS,
        headless=True,
        ignore_default_args=["--disable-back-forward-cache"],
    )
    yield chromium
    chromium.close()


@pytest.mark.parametrize("which", ["as_shipped", "as_playwright_runs_it"])
def test_back_after_signing_out_shows_the_sign_in_page_not_the_chat(live: Stack, browser, browser_as_shipped, which):  # noqa: ANN001, E501
    browser = browser_as_shipped if which == "as_shipped" else browser
    customer = make_customer()
    secret = "My card ends in 4242 and I live at 12 Elm Street."
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body=secret)
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 1)

    page.click("header form button[type=submit]")  # Sign out
    page.wait_for_url("**/accounts/login/**")
    page.go_back(wait_until="commit")  # a page shown from the back/forward cache fires no "load"
    with contextlib.suppress(PlaywrightTimeoutError):
        page.wait_for_url("**/accounts/login/**", timeout=10_000)

    assert "/accounts/login/" in page.url, f"Back after signing out showed {page.url}, not the sign-in page"
    assert secret not in page.content(), "Back after signing out showed the chat from the browser's cache"
    page.context.close()
