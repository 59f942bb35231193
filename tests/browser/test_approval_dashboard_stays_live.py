"""The approval dashboard says "Live": a request made while its socket was being set up comes in
without a reload, so does one whose list read failed once, and a session that ended on the server
never makes the cards on the screen read as decided."""

from __future__ import annotations

import re

import pytest
from django.contrib.sessions.models import Session
from playwright.sync_api import expect

from tests.approvals.conftest import make_staff
from tests.browser.conftest import Stack, fail_the_first_read, sockets_that_can_go_silent
from tests.browser.test_approval_dashboard import decide_elsewhere, request_refund, sign_in_staff
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import AuthorKind

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


def test_a_request_made_while_the_dashboard_connected_comes_in_without_a_reload(live: Stack, browser):  # noqa: ANN001
    """The socket opens before the server has joined it to the staff group; the page read the list
    then and said "Live". A request made between that read and the join rang nobody: it was not on
    the dashboard until something else changed."""
    customer = make_customer()
    for number in ("R-1001", "R-1002"):
        make_order(customer, total_cents=64900, number=number)
    make_staff("erin", can_decide=True)
    one = request_refund(live, customer, "R-1001")
    page = sign_in_staff(browser, live, "erin")
    page.wait_for_selector("#live-status:has-text('Live')")
    held = []
    # The socket of the next load is held before it reaches the server: the server's setup (its
    # checks, the group join) is slow, as on a busy host.
    page.route_web_socket(re.compile(r"/ws/staff/approvals/"), lambda ws: held.append(ws))
    page.reload()
    page.wait_for_load_state("networkidle")
    assert len(held) == 1
    expect(page.locator(f"li.approval[data-approval-id='{one.pk}']")).to_be_visible()

    two = request_refund(live, customer, "R-1002")
    held[0].connect_to_server()

    expect(page.locator(f"li.approval[data-approval-id='{two.pk}']")).to_be_visible()
    expect(page.locator("#live-status")).to_have_text("Live: new requests appear here automatically.")


def test_a_request_made_while_the_socket_was_silent_comes_in_once_the_page_notices(live: Stack, browser):  # noqa: ANN001
    """A laptop that changed networks leaves a half-open socket: nothing more arrives on it, and the
    browser does not see it close for many minutes. A new request waited for a decision off the
    dashboard, which still said "Live"."""
    customer = make_customer()
    for number in ("R-6001", "R-6002"):
        make_order(customer, total_cents=64900, number=number)
    make_staff("erin", can_decide=True)
    one = request_refund(live, customer, "R-6001")
    page = sign_in_staff(browser, live, "erin")
    links = sockets_that_can_go_silent(page, r"/ws/staff/approvals/")
    with page.expect_response(lambda response: "/staff/approvals/pending/" in response.url):
        page.reload()  # and the page's read at "ready" is over
    expect(page.locator("#live-status")).to_have_text("Live: new requests appear here automatically.")
    expect(page.locator(f"li.approval[data-approval-id='{one.pk}']")).to_be_visible()
    page.evaluate("() => window.heartbeat && window.heartbeat.waits(1000, 1000)")
    links[0]["up"] = False  # from now on the socket carries nothing either way, and never closes

    two = request_refund(live, customer, "R-6002")

    expect(page.locator(f"li.approval[data-approval-id='{two.pk}']")).to_be_visible()
    assert len(links) >= 2  # a socket of its own brought it
    assert page.locator(f"li.approval[data-approval-id='{two.pk}']").count() == 1
    expect(page.locator("#live-status")).to_have_text("Live: new requests appear here automatically.")


def test_a_list_read_that_failed_is_made_again(live: Stack, browser):  # noqa: ANN001
    """A new request rang the dashboard; its read of the list got a 503 (a moment without a database
    connection): the page said "retrying" and never did, and the request stayed off it."""
    customer = make_customer()
    for number in ("R-2001", "R-2002"):
        make_order(customer, total_cents=64900, number=number)
    make_staff("erin", can_decide=True)
    one = request_refund(live, customer, "R-2001")
    page = sign_in_staff(browser, live, "erin")
    page.wait_for_selector("#live-status:has-text('Live')")
    failed = fail_the_first_read(page, r"/staff/approvals/pending/")
    two = request_refund(live, customer, "R-2002")

    expect(page.locator(f"li.approval[data-approval-id='{two.pk}']")).to_be_visible()
    assert len(failed) == 1
    expect(page.locator(f"li.approval[data-approval-id='{one.pk}']")).to_be_visible()
    expect(page.locator("#live-status")).to_have_text("Live: new requests appear here automatically.")


def test_a_session_ended_on_the_server_never_makes_the_cards_read_as_decided(live: Stack, browser):  # noqa: ANN001
    """The session ended without a sign-out (expired, cleared): the socket learns it at its next
    check, up to 30 s later, and meanwhile rings for a new request. The list's address then led to the
    sign-in page, read as an empty list: the card being typed in said "decided by someone else" and
    the other left the screen, though both still waited for a decision."""
    customer = make_customer()
    for number in ("R-3001", "R-3002", "R-3003"):
        make_order(customer, total_cents=64900, number=number)
    make_staff("erin", can_decide=True)
    one, two = request_refund(live, customer, "R-3001"), request_refund(live, customer, "R-3002")
    page = sign_in_staff(browser, live, "erin")
    page.wait_for_selector("#live-status:has-text('Live')")
    page.fill(f"#approval-{one.pk}-reject-note", "Checking with the warehouse")
    Session.objects.all().delete()

    # The page reads the list at the ring: its address leads to the sign-in page now.
    with page.expect_response(lambda response: "/accounts/login/" in response.url):
        request_refund(live, customer, "R-3003")
    page.evaluate("() => new Promise(done => setTimeout(done, 100))")  # what the page does with it

    for approval in (one, two):
        card = page.locator(f"#approval-{approval.pk}")
        assert card.count() == 1
        assert card.locator("[data-state]").inner_text() == "pending"
        assert card.locator(".gone-notice").inner_text() == ""
    assert page.input_value(f"#approval-{one.pk}-reject-note") == "Checking with the warehouse"
    expect(page.locator("#live-status")).to_have_text(
        "You were signed out: sign in again to see the list as it is now."
    )


def test_a_socket_that_finds_the_session_ended_says_signed_out_not_refused(live: Stack, browser):  # noqa: ANN001
    """The socket's own check found the session gone (its account was rung: a name changed); it closed,
    its reconnect was refused, and the page said "Not allowed", as to someone who never could, though
    a sign-in was all it needed. The page now reads the list once to tell which; cards stay as they were."""
    customer = make_customer()
    make_order(customer, total_cents=64900, number="R-5001")
    erin = make_staff("erin", can_decide=True)
    approval = request_refund(live, customer, "R-5001")
    page = sign_in_staff(browser, live, "erin")
    page.wait_for_selector("#live-status:has-text('Live')")
    Session.objects.all().delete()

    erin.first_name = "Erin"
    erin.save()

    expect(page.locator("#live-status")).to_have_text(
        "You were signed out: sign in again to see the list as it is now."
    )
    card = page.locator(f"#approval-{approval.pk}")
    assert card.locator("[data-state]").inner_text() == "pending"
    assert card.locator(".gone-notice").inner_text() == ""


def test_what_the_customer_writes_while_a_card_is_open_shows_on_it_without_a_reload(live: Stack, browser):  # noqa: ANN001
    """The dashboard read its cards again on approvals only: "please cancel the refund" written while a
    person read the card reached it only when some other request changed (or at a reload)."""
    customer = make_customer()
    make_order(customer, total_cents=64900, number="R-4001")
    make_staff("erin", can_decide=True)
    frank = make_staff("frank", can_decide=True)
    approval = request_refund(live, customer, "R-4001")
    page = sign_in_staff(browser, live, "erin")
    # The page's own catch-up read is over before the customer writes.
    with page.expect_response(lambda response: "/staff/approvals/pending/" in response.url):
        page.reload()
    page.wait_for_selector("#live-status:has-text('Live')")
    warnings = page.locator(f"#approval-{approval.pk} [data-live=warnings]")
    expect(warnings).to_have_text("")

    ticket_services.message_post(
        ticket=approval.ticket_id, author_kind=AuthorKind.CUSTOMER, body="Please cancel the refund, it works now."
    )

    expect(warnings).to_contain_text("The customer wrote after the agent asked")
    expect(warnings).to_contain_text("Please cancel the refund, it works now.")
    decide_elsewhere(approval, frank)  # the agent then answers the message (the test ends with no run left)
