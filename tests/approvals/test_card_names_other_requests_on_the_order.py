"""A pending refund request's card names the other refunds asked for on the same order, in any
ticket, as they are when the page is shown: the first of two requests for one order says that a
second one waits, not only the second that the first exists. A reviewer approving the first does
not miss the other (the same holds on the admin's page of the request)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from agents.models import Refund, RefundStatus
from agents.runner import advance
from approvals import services
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_money_gates import Refunds
from tests.agents.test_money_path import assert_money_invariants, order_for, paid
from tests.approvals.test_dashboard_cards import ask, card_html, dashboard, part, text_of
from tests.conftest import make_customer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]
WARNINGS = r'<div data-live="warnings">(.*?)</div>'
REFUNDS = r'<section class="refund-history"[^>]*>(.*?)</section>'


def two_requests_for_one_order(sandbox):  # noqa: ANN001, ANN201
    """$300 asked in one ticket (above the threshold), then $100 of the same $649 order in another
    (a second refund on the order): both wait for staff, and together they are within what the
    order can refund, so no over-refund warning names them."""
    customer = make_customer()
    order = order_for(customer, "E-7001", 64900, sandbox)
    first = ask(customer, "Please refund $300.00 of order E-7001")
    advance(first.pk, model=Refunds(("E-7001", 30000)))
    second = ask(customer, "Please refund $100.00 of order E-7001, the lid was cracked")
    advance(second.pk, model=Refunds(("E-7001", 10000)))
    one = ApprovalRequest.objects.get(ticket=first)
    two = ApprovalRequest.objects.get(ticket=second)
    assert (one.status, two.status) == (ApprovalStatus.PENDING, ApprovalStatus.PENDING)
    assert "second refund" in two.reason and "second refund" not in one.reason
    return order, first, second, one, two


def test_the_first_card_names_a_later_request_for_the_same_order_from_another_ticket(sandbox, client, approver):  # noqa: ANN001
    _, first, second, one, two = two_requests_for_one_order(sandbox)
    client.force_login(approver)

    page = dashboard(client)

    warning = part(page, one, WARNINGS)
    assert (
        f"another refund is asked for on order E-7001 and not paid yet: $100.00 in ticket #{second.pk} "
        f"(asked, waiting for approval (request #{two.pk}))" in warning
    ), warning
    warnings_html = re.search(WARNINGS, card_html(page, one), re.DOTALL).group(1)
    assert f'href="{reverse("staff:ticket", kwargs={"ticket_id": second.pk})}"' in warnings_html
    history = part(page, one, REFUNDS)
    assert f"$100.00 Asked, waiting for approval (request #{two.pk})" in history and f"#{second.pk}" in history
    assert "$300.00" not in history  # the card's own request is not listed as another
    # And the later card names the earlier one, as it is now (not only in its reason, written when asked).
    assert f"$300.00 in ticket #{first.pk} (asked, waiting for approval (request #{one.pk}))" in part(
        page, two, WARNINGS
    )


def test_the_card_shows_the_other_requests_as_they_are_when_the_page_is_shown(sandbox, client, approver):  # noqa: ANN001
    order, first, second, one, two = two_requests_for_one_order(sandbox)
    client.force_login(approver)
    assert f"(request #{two.pk})" in part(dashboard(client), one, WARNINGS)
    services.approval_decide(approval_id=two.pk, user=approver, approve=True)
    advance(second.pk, model=Refunds(("E-7001", 10000)))
    assert [r["amount"] for r in paid(sandbox, order)] == [10000]

    page = dashboard(client)

    assert part(page, one, WARNINGS) == ""  # nothing else waits on the order now
    history = part(page, one, REFUNDS)
    assert f"$100.00 {RefundStatus.SUCCEEDED.label}" in history and f"#{second.pk}" in history
    assert "Asked" not in history
    assert_money_invariants(sandbox, needed_approval={"E-7001"})


def test_the_admins_page_of_a_request_names_the_other_requests_for_the_same_order(sandbox, admin_client):  # noqa: ANN001
    _, first, second, one, two = two_requests_for_one_order(sandbox)

    page = admin_client.get(f"/admin/approvals/approvalrequest/{one.pk}/change/")

    assert page.status_code == 200
    text = text_of(page.content.decode())
    assert f"$100.00 · Asked, waiting for approval (request #{two.pk})" in text, text
    assert f"ticket #{second.pk}" in text
    assert f'href="{reverse("staff:ticket", kwargs={"ticket_id": second.pk})}"' in page.content.decode()


def test_the_card_says_a_failed_refund_not_seen_at_the_provider_may_still_be_paid(sandbox, client, approver):  # noqa: ANN001
    """A refund failed without the provider ever showing it is asked about again for hours: the
    request may still be on its way, and land. A reviewer approving another refund on the order read
    only "Failed", and approved the same money again; the card now says it may still be paid."""
    order, first, second, one, two = two_requests_for_one_order(sandbox)
    services.approval_decide(approval_id=two.pk, user=approver, approve=True)
    advance(second.pk, model=Refunds(("E-7001", 10000)))
    # As the reconciler leaves a refund the provider had no record of (refund_reconcile): failed, no id.
    Refund.objects.filter(order=order).update(status=RefundStatus.FAILED, provider_refund_id=None)
    client.force_login(approver)

    history = part(dashboard(client), one, REFUNDS)

    assert f"$100.00 {RefundStatus.FAILED.label}, not found at the payment provider yet: it may still be paid" in (
        history
    ), history
    # Once the provider has shown it (an id), a failure is final: "Failed" alone.
    Refund.objects.filter(order=order).update(provider_refund_id="re_shown")
    history = part(dashboard(client), one, REFUNDS)
    assert f"$100.00 {RefundStatus.FAILED.label}" in history and "may still be paid" not in history
