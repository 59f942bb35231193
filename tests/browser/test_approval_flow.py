"""A refund that needs a staff approval, end to end in two real browsers: the customer waits
"under review", a staff member approves on the dashboard, the customer sees the refund live."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from agents.models import Refund, RefundStatus
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.approvals.conftest import make_staff
from tests.browser.conftest import PAGE_TIMEOUT_MS, SCREENSHOTS, Stack, running_stack, sign_in
from tests.conftest import make_customer, make_order

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def payments_stack(
    _orm_beside_playwright, django_db_setup, payment_sandbox_process, tmp_path_factory
) -> Iterator[Stack]:  # noqa: ANN001, E501
    """daphne + one worker, both reaching the payment sandbox (a separate process)."""
    folder = tmp_path_factory.mktemp("approval-stack")
    with running_stack(folder, token_delay_ms=20, STRIPE_API_BASE=payment_sandbox_process.base_url) as started:
        yield started


def sign_in_staff(browser, stack: Stack, username: str):  # noqa: ANN001, ANN201
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    page = context.new_page()
    page.goto(stack.url("/accounts/login/?next=/staff/approvals/"))
    page.fill("#id_username", username)
    page.fill("#id_password", "staff-pass-123")
    page.click("main form button[type=submit]")
    page.wait_for_url(stack.url("/staff/approvals/"))
    return page


def test_staff_approve_a_refund_on_the_dashboard_and_the_customer_sees_it_confirmed_live(
    payments_stack: Stack,
    browser,  # noqa: ANN001
    payment_sandbox,  # noqa: ANN001
):
    stack = payments_stack
    customer = make_customer()
    order = make_order(customer, total_cents=64900, number="E-5001")
    order.lines.update(description="Espresso machine")
    payment_sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    make_staff("dana", can_decide=True)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    staff = sign_in_staff(browser, stack, "dana")
    staff.wait_for_selector("#live-status:has-text('Live')")
    assert staff.locator("li.approval").count() == 0

    shopper = sign_in(browser, stack, customer)
    shopper.click("text=New ticket")
    shopper.fill("#id_body", "My espresso machine E-5001 broke after a week. Please refund order E-5001.")
    shopper.click("form.new-ticket button[type=submit]")
    shopper.wait_for_url(re.compile(r"/tickets/\d+/$"))

    # The customer is told the request is under review; no worker waits for it.
    shopper.wait_for_selector("#chat-log li.notice:has-text('under review')", timeout=30_000)
    assert "review" in shopper.locator("#chat-status-text").inner_text().lower()
    shopper.screenshot(path=str(SCREENSHOTS / "customer-under-review.png"))

    # The dashboard shows the request without a reload.
    card = staff.locator("li.approval", has_text="E-5001")
    card.wait_for(timeout=30_000)
    assert "$649.00" in card.inner_text()
    staff.screenshot(path=str(SCREENSHOTS / "staff-dashboard.png"), full_page=True)
    card.locator("input[name=confirm_amount]").check()  # $649.00 is above the confirmation level
    card.locator("button[data-action=approve]").click()
    staff.wait_for_selector(".flash li.success:has-text('Approved')")

    # The customer sees the refund confirmed, live.
    shopper.wait_for_selector("#chat-log li.msg.from-agent:has-text('refunded $649.00')", timeout=30_000)
    shopper.screenshot(path=str(SCREENSHOTS / "customer-refunded.png"))

    approval = ApprovalRequest.objects.get(ticket__customer=customer)
    assert approval.status == ApprovalStatus.APPROVED and approval.decided_by.username == "dana"
    refund = Refund.objects.get(order=order)
    assert refund.status == RefundStatus.SUCCEEDED
    at_provider = [r for r in payment_sandbox.refunds() if r["payment_intent"] == order.payment_reference]
    assert [r["id"] for r in at_provider] == [refund.provider_refund_id]
    assert shopper.locator("#chat-log li.msg.from-agent:has-text('refunded $649.00')").count() == 1
