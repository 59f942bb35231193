"""A member of staff who is also a customer does not stop the review of their own refunds.

The dashboard refuses a decision on one's own ticket (approvals.services.OwnRequest): "the review the
policy asks for is a second person's". The customer list's "Stop reviewing every refund of the
selected customers", and the customer's page, took it away all the same: a member of staff allowed
to change customers (no superuser) unticked "every refund reviewed" on their own customer profile (or
one under their email address), and their next refunds under the threshold were paid with nobody but
them having looked. Their profile's email and login, which tie it to them, are a colleague's to
change too. Tightening (every refund reviewed) stays anyone's to do.
"""

from __future__ import annotations

import pytest
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer
from tickets.models import Customer

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:tickets_customer_changelist"


def _staff_who_may_change_customers(username: str, email: str):  # noqa: ANN202
    person = get_user_model().objects.create_user(username=username, password="pw-staff-123", email=email)
    person.is_staff = True
    person.save()
    person.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="tickets", codename__in=["view_customer", "change_customer"])
    )
    return get_user_model().objects.get(pk=person.pk)


def _signed_in(user) -> Client:  # noqa: ANN001
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("tied_by", ["login", "email"])
def test_stop_reviewing_leaves_the_own_customer_profile_reviewed_and_says_so(tied_by):
    lead = _staff_who_may_change_customers("lead", "lead@shop.test")
    own = make_customer("lead-shopping", flagged=True)
    if tied_by == "login":
        own.user = lead
    else:
        own.email = "Lead@Shop.test"
    own.save()
    other = make_customer("someone", flagged=True)

    answer = _signed_in(lead).post(
        reverse(CHANGELIST),
        {"action": "stop_reviewing_every_refund", "_selected_action": [own.pk, other.pk]},
        follow=True,
    )

    assert Customer.objects.get(pk=own.pk).requires_refund_approval, (
        f"a member of staff stopped the review of their own refunds (their customer profile, tied by {tied_by})"
    )
    assert not Customer.objects.get(pk=other.pk).requires_refund_approval  # the others are done as asked
    said = [(m.level, m.message) for m in answer.context["messages"]]
    assert any(level == messages.WARNING and "your own" in text for level, text in said), said


def test_review_every_refund_of_the_own_customer_profile_is_done():
    lead = _staff_who_may_change_customers("lead", "lead@shop.test")
    own = make_customer("lead-shopping")
    own.email = "lead@shop.test"
    own.save()

    _signed_in(lead).post(reverse(CHANGELIST), {"action": "review_every_refund", "_selected_action": [own.pk]})

    assert Customer.objects.get(pk=own.pk).requires_refund_approval


def _page_data(client: Client, customer: Customer) -> dict[str, object]:
    page = client.get(reverse("admin:tickets_customer_change", args=[customer.pk]))
    form = page.context["adminform"].form
    return {name: form[name].value() for name in form.fields if form[name].value() is not None}


@pytest.mark.parametrize(
    ("field", "value"),
    [("requires_refund_approval", False), ("email", "somebody-else@shop.test")],
    ids=["unticks-the-review", "unties-the-email"],
)
def test_the_own_customer_page_does_not_stop_the_review_or_untie_the_profile(field, value):
    lead = _staff_who_may_change_customers("lead", "lead@shop.test")
    own = make_customer("lead-shopping", flagged=True)
    own.email = "lead@shop.test"
    own.save()
    client = _signed_in(lead)
    data = _page_data(client, own)
    data[field] = value
    if value is False:
        data.pop(field)  # an unticked box is not sent

    answer = client.post(reverse("admin:tickets_customer_change", args=[own.pk]), data)

    own.refresh_from_db()
    assert answer.status_code == 200, f"the page of their own customer profile saved {field}={value!r}"
    assert own.requires_refund_approval and own.email == "lead@shop.test"
    assert "your own customer profile" in answer.content.decode()


def test_a_colleagues_customer_page_is_changed_as_asked():
    lead = _staff_who_may_change_customers("lead", "lead@shop.test")
    someone = make_customer("someone", flagged=True)
    client = _signed_in(lead)
    data = _page_data(client, someone)
    data.pop("requires_refund_approval")

    answer = client.post(reverse("admin:tickets_customer_change", args=[someone.pk]), data)

    assert answer.status_code == 302
    assert not Customer.objects.get(pk=someone.pk).requires_refund_approval
