"""The approval dashboard in a real browser while requests come and go: what a person is doing
(a typed reason, an open conversation, keyboard focus) survives every live update."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from playwright.sync_api import expect

from approvals import services
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.approvals.conftest import make_staff
from tests.browser.conftest import PAGE_TIMEOUT_MS, SCREENSHOTS, Stack
from tests.browser.test_accessibility import check_page
from tests.conftest import make_customer, make_order
from tests.workers import wait_until
from tickets import services as ticket_services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


def sign_in_staff(browser, stack: Stack, username: str):  # noqa: ANN001, ANN201
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    context.add_init_script(
        "window.__csp = []; document.addEventListener('securitypolicyviolation', "
        "e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"
    )
    page = context.new_page()
    page.goto(stack.url("/accounts/login/?next=/staff/approvals/"))
    page.fill("#id_username", username)
    page.fill("#id_password", "staff-pass-123")
    page.click("main form button[type=submit]")
    page.wait_for_url(stack.url("/staff/approvals/"))
    return page


def request_refund(stack: Stack, customer, number: str, *, body: str = "") -> ApprovalRequest:  # noqa: ANN001
    """The customer asks; the real worker runs the agent, which pauses on a refund above the threshold."""
    body = body or f"Please refund order {number}"
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=body)
    wait_until(
        lambda: ApprovalRequest.objects.filter(ticket=ticket, status=ApprovalStatus.PENDING).exists(),
        timeout=30,
        what=f"the approval request for {number}",
        cluster=stack.cluster,
    )
    return ApprovalRequest.objects.get(ticket=ticket)


def decide_elsewhere(approval: ApprovalRequest, user) -> None:  # noqa: ANN001
    """Another person's decision, from a thread without Playwright's event loop (the notification
    to the dashboards goes through async_to_sync, which refuses to run beside a loop)."""

    def decide() -> None:
        try:
            services.approval_decide(approval_id=approval.pk, user=user, approve=False, note="handled elsewhere")
        finally:
            connection.close()

    thread = threading.Thread(target=decide)
    thread.start()
    thread.join(timeout=30)


def test_a_live_update_keeps_a_typed_reason_an_open_conversation_and_focus_and_announces_the_new_request(
    live: Stack,
    browser,  # noqa: ANN001
):
    customer = make_customer()
    for number in ("L-1001", "L-1002", "L-1003"):
        make_order(customer, total_cents=64900, number=number)
    make_staff("erin", can_decide=True)
    frank = make_staff("frank", can_decide=True)
    one, two = request_refund(live, customer, "L-1001"), request_refund(live, customer, "L-1002")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    page = sign_in_staff(browser, live, "erin")
    page.wait_for_selector("#live-status:has-text('Live')")
    conversation = page.locator(f"#approval-{two.pk} details.conversation")
    conversation.locator("summary").click()
    reason = page.locator(f"#approval-{one.pk}-reject-note")
    reason.click()
    page.keyboard.type("Duplicate of an earlier ")

    # Meanwhile a new request arrives through the product; the dashboard hears of it over its socket.
    three = request_refund(live, customer, "L-1003")

    expect(page.locator(f"li.approval[data-approval-id='{three.pk}']")).to_be_visible()
    assert reason.input_value() == "Duplicate of an earlier "
    assert page.evaluate("document.activeElement.id") == f"approval-{one.pk}-reject-note"
    assert conversation.evaluate("details => details.open") is True
    page.keyboard.type("request")  # the keys still land in the same field
    assert reason.input_value() == "Duplicate of an earlier request"
    expect(page.locator("#new-banner")).to_have_text("1 new request added below.")
    assert page.locator("#new-banner").get_attribute("aria-live") == "polite"
    assert page.eval_on_selector_all("li.approval", "cards => cards.map(c => c.dataset.approvalId)") == [
        str(one.pk),
        str(two.pk),
        str(three.pk),
    ]
    page.screenshot(path=str(SCREENSHOTS / "dashboard-new-request.png"), full_page=True)

    # Someone else rejects the request this person is typing in: marked, not ripped out.
    decide_elsewhere(one, frank)
    card = page.locator(f"#approval-{one.pk}")
    expect(card.locator(".gone-notice")).to_contain_text("No longer pending: this request was rejected by someone else")
    assert reason.input_value() == "Duplicate of an earlier request"
    assert page.evaluate("document.activeElement.id") == f"approval-{one.pk}-reject-note"
    assert card.locator("button[data-action=reject]").get_attribute("aria-disabled") == "true"
    # ...and one nobody is working in simply leaves the list (and the "new" announcement).
    decide_elsewhere(three, frank)
    expect(page.locator(f"#approval-{three.pk}")).to_have_count(0)
    expect(page.locator("#new-banner")).to_have_text("")
    assert conversation.evaluate("details => details.open") is True
    page.screenshot(path=str(SCREENSHOTS / "dashboard-decided-elsewhere.png"), full_page=True)

    # Sending the reason on the card decided elsewhere sends nothing.
    page.keyboard.press("Enter")
    page.wait_for_timeout(300)
    assert page.url == live.url("/staff/approvals/")
    assert ApprovalRequest.objects.get(pk=one.pk).note == "handled elsewhere"
    assert page.evaluate("window.__csp") == []


def test_an_open_card_names_a_later_request_for_the_same_order_as_it_arrives(live: Stack, browser):  # noqa: ANN001
    """Two tickets ask for refunds of one order, within what it can refund: the card already on the
    screen for the first says, live, that a second request for the order now waits, with its ticket."""
    customer = make_customer()
    make_order(customer, total_cents=64900, number="L-2001")
    make_staff("erin", can_decide=True)
    one = request_refund(live, customer, "L-2001", body="Please refund $300.00 of order L-2001")
    page = sign_in_staff(browser, live, "erin")
    page.wait_for_selector("#live-status:has-text('Live')")
    warnings = page.locator(f"#approval-{one.pk} [data-live=warnings]")
    expect(warnings).to_have_text("")

    two = request_refund(live, customer, "L-2001", body="Please refund $100.00 of order L-2001")

    expect(page.locator(f"li.approval[data-approval-id='{two.pk}']")).to_be_visible()
    expect(warnings).to_contain_text(
        f"Not the only request: another refund is asked for on order L-2001 and not paid yet: $100.00 in ticket "
        f"#{two.ticket_id} (asked, waiting for approval (request #{two.pk}))"
    )
    expect(warnings.locator("a")).to_have_attribute("href", f"/staff/tickets/{two.ticket_id}/")
    expect(page.locator(f"#approval-{one.pk} [data-live=refunds]")).to_contain_text("$100.00")


def test_a_card_being_typed_in_whose_request_ran_out_of_time_says_it_expired_not_decided_elsewhere(
    live: Stack,
    browser,  # noqa: ANN001
):
    # Past its expiry the request leaves the pending list at once (judged on the database's clock),
    # before the sweeper marks it expired and tells the dashboards: the next live update (here, another
    # request decided) drops it, and the card the person is typing in says why.
    customer = make_customer()
    for number in ("X-1001", "X-1002"):
        make_order(customer, total_cents=64900, number=number)
    make_staff("erin", can_decide=True)
    frank = make_staff("frank", can_decide=True)
    one, two = request_refund(live, customer, "X-1001"), request_refund(live, customer, "X-1002")

    page = sign_in_staff(browser, live, "erin")
    page.wait_for_selector("#live-status:has-text('Live')")
    reason = page.locator(f"#approval-{one.pk}-reject-note")
    reason.click()
    page.keyboard.type("Checking the order first")
    with connection.cursor() as cursor:  # its time ran out; the sweeper has not marked it yet
        cursor.execute(
            "UPDATE approvals_approvalrequest SET expires_at = now() - interval '1 second' WHERE id = %s", [one.pk]
        )

    decide_elsewhere(two, frank)

    card = page.locator(f"#approval-{one.pk}")
    expect(card.locator(".gone-notice")).to_contain_text("No longer pending: this request was expired.")
    assert reason.input_value() == "Checking the order first"


def test_a_reason_sent_after_signing_in_again_in_another_tab_is_refused_plainly_and_still_in_its_box(
    live: Stack,
    browser,  # noqa: ANN001
):
    """The dashboard was read before the person signed in again in another tab: its forms carry the
    CSRF token of the sign-in before. Rejecting from it is refused, on the product's page, and the
    reason typed is back in the card's box on the dashboard, to send again."""
    customer = make_customer()
    make_order(customer, total_cents=64900, number="S-1001")
    make_staff("erin", can_decide=True)
    approval = request_refund(live, customer, "S-1001")
    page = sign_in_staff(browser, live, "erin")
    page.wait_for_selector("#live-status:has-text('Live')")
    words = "Already refunded by bank transfer on Monday (ref 4471)"
    page.fill(f"#approval-{approval.pk}-reject-note", words)

    other = page.context.new_page()  # another tab of the same browser: signing in there gives a new token
    other.goto(live.url("/accounts/login/?next=/staff/approvals/"))
    other.fill("#id_username", "erin")
    other.fill("#id_password", "staff-pass-123")
    other.click("main form button[type=submit]")
    other.wait_for_url(live.url("/staff/approvals/"))
    other.close()

    with page.expect_response(lambda r: r.request.method == "POST") as sent:
        page.click(f"#approval-{approval.pk} button[data-action=reject]")
    assert sent.value.status == 403
    page.wait_for_selector("#csrf-failure")
    expect(page.locator("main h1")).to_have_text("Nothing was done: the page was out of date")
    assert "CSRF" not in page.inner_text("body")
    assert words not in page.content()  # nothing of the posted form is shown, nor offered to send again
    assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING
    check_page(page, "the page of a form older than the sign-in")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "form-older-than-the-sign-in.png"), full_page=True)

    page.click("#csrf-failure-back")
    page.wait_for_url(live.url("/staff/approvals/"))
    reason = page.locator(f"#approval-{approval.pk}-reject-note")
    expect(reason).to_have_value(words)
    expect(page.locator(f"#approval-{approval.pk}-reject-note-kept")).to_contain_text("press Reject to send it")
    page.screenshot(path=str(SCREENSHOTS / "dashboard-reason-kept-after-sign-in-changed.png"), full_page=True)

    page.click(f"#approval-{approval.pk} button[data-action=reject]")
    expect(page.locator(".flash")).to_contain_text(f"Rejected request #{approval.pk}")
    approval.refresh_from_db()
    assert (approval.status, approval.note) == (ApprovalStatus.REJECTED, words)
    # Decided: the tab keeps nothing of it any more.
    assert page.evaluate("Object.keys(sessionStorage).filter(k => k.startsWith('approval-draft-'))") == []
    assert page.evaluate("window.__csp") == []
    page.context.close()
