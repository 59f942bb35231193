"""A refund staff declined, or a person stopped, is reviewed when asked again -- even after the
order's number is corrected in the admin: it cannot be, once a refund was asked on the order.

README, "Refunds: the rules": a refund on an order on which staff **rejected a refund before**, or on
which a person **stopped one**, in any ticket: asking again is reviewed. Earlier requests are found
by the order number in their arguments, so the admin keeps an order's number, customer, currency and
payment reference as they were once a refund was asked on it (``OrderAdmin.PAID_AGAINST``), not only
once one was paid: a declined or stopped refund has no refund row.
"""

from __future__ import annotations

import pytest

from agents.models import CallStatus, Refund, RefundStatus
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_money_gates import confirm, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.agents.test_refund_a_person_stopped_matrix import AsksForTheRefund
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Customer

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
    pytest.mark.customer_confirms,  # the refund waits for the customer's Confirm when the person takes over
]


def _post_data(page) -> dict:  # noqa: ANN001
    """What the admin's change page would send back unchanged (the form and its inlines)."""
    data: dict = {}
    form = page.context["adminform"].form
    for name, field in form.fields.items():
        value = form.initial.get(name, field.initial)
        if callable(value):
            value = value()
        if hasattr(value, "hour"):  # the admin's split date and time widget
            data[f"{name}_0"], data[f"{name}_1"] = value.strftime("%Y-%m-%d"), value.strftime("%H:%M:%S")
        elif value is not None:
            data[name] = getattr(value, "pk", value)
    for inline in page.context["inline_admin_formsets"]:
        formset = inline.formset
        for name, value in formset.management_form.initial.items():
            data[f"{formset.prefix}-{name}"] = value
        for sub in formset.forms:
            for name, field in sub.fields.items():
                value = sub.initial.get(name, field.initial)
                if value is not None and not isinstance(value, (list, dict)):
                    data[f"{sub.prefix}-{name}"] = getattr(value, "pk", value)
    return data


@pytest.mark.parametrize("first_ended_by", ["staff_rejected", "person_took_over"])
def test_a_declined_or_stopped_refund_is_reviewed_after_the_orders_number_is_corrected(
    admin_client,
    sandbox,
    person,
    first_ended_by,  # noqa: ANN001
):
    customer = make_customer(flagged=first_ended_by == "staff_rejected")
    order = order_for(customer, "OA 7701", 5000, sandbox)  # $50.00: under every threshold
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $50 on OA 7701")
    advance(ticket.pk, model=AsksForTheRefund("OA 7701", 5000))
    (first,) = refund_calls(ticket)
    if first_ended_by == "staff_rejected":
        approval = ApprovalRequest.objects.get(tool_call=first)
        approver = make_staff("renaming-approver", can_decide=True)
        approval_services.approval_decide(approval_id=approval.pk, user=approver, approve=False, note="Not eligible")
        Customer.objects.filter(pk=customer.pk).update(requires_refund_approval=False)  # the flag was lifted
    else:
        assert first.status == CallStatus.AWAITING_CONFIRMATION
        ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
    advance(ticket.pk, model=AsksForTheRefund("OA 7701", 5000))
    first.refresh_from_db()
    assert first.status != CallStatus.SUCCEEDED and paid(sandbox, order) == []
    assert not Refund.objects.filter(order=order).exists()

    # Staff try to correct the order's number in the admin: a refund was asked on it, so it stays.
    page = admin_client.get(f"/admin/tickets/order/{order.pk}/change/")
    assert "number" not in page.context["adminform"].form.fields, "the number of an order a refund was asked on"
    saved = admin_client.post(f"/admin/tickets/order/{order.pk}/change/", {**_post_data(page), "number": "OA-7701"})
    assert saved.status_code == 302
    order.refresh_from_db()
    assert order.number == "OA 7701"
    again_number = "OA 7701"

    # The customer asks again, in a new ticket, with the number as their order now reads.
    again_ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body=f"Refund $50 on {again_number}"
    )
    advance(again_ticket.pk, model=AsksForTheRefund(again_number, 5000))
    (again,) = refund_calls(again_ticket)
    if again.status == CallStatus.AWAITING_CONFIRMATION:
        confirm(again_ticket, again)  # the customer presses Confirm
        advance(again_ticket.pk, model=AsksForTheRefund(again_number, 5000))
    again.refresh_from_db()
    approved = set(
        ApprovalRequest.objects.filter(status=ApprovalStatus.APPROVED).values_list("tool_call_id", flat=True)
    )
    unreviewed = [r.amount_cents for r in Refund.objects.filter(order=order, status=RefundStatus.SUCCEEDED)
                  if r.tool_call_id not in approved]  # fmt: skip
    who = "staff declined" if first_ended_by == "staff_rejected" else "a person stopped"
    assert again.approval_required and unreviewed == [], (
        f"a refund {who} on this order was asked again and paid with no review: {unreviewed}; first call "
        f"{first.status} ({first.arguments}), second {again.status}, approval_required={again.approval_required}"
    )
