"""A customer flagged "every refund reviewed" stays flagged whatever a page read before says.

README ("Refunds: the rules"): every refund of a flagged customer needs a staff approval. Django
compares what a page posts with the row as it is at the save, so a customer list or page read
before a colleague flagged someone would write the old value back, silently, and that customer's
refunds would be paid without the review staff asked for. The flag is set on selected customers by
an admin action (a change to those rows only, logged), and the customer's page writes only what was
changed on it and refuses a change to a value someone changed since it was read.
"""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer
from tickets.models import Customer

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:tickets_customer_changelist"


def _admin(name: str) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_superuser(name, f"{name}@example.test", "pw-admin-123"))
    return client


def _page_as_shown(client: Client, customer: Customer) -> dict:
    page = client.get(reverse("admin:tickets_customer_change", args=[customer.pk]))
    assert page.status_code == 200
    form = page.context["adminform"].form
    data = {}
    for name in form.fields:
        value = form[name].value()
        if isinstance(value, bool):
            if value:
                data[name] = "on"
        else:
            data[name] = "" if value is None else value
    return data


def _flag(client: Client, *customers: Customer, action: str = "review_every_refund") -> int:
    answer = client.post(reverse(CHANGELIST), {"action": action, "_selected_action": [c.pk for c in customers]})
    return answer.status_code


def test_a_stale_customer_page_does_not_unflag_a_customer_a_colleague_flagged():
    bob = make_customer("bob")
    first, second = _admin("first-admin"), _admin("second-admin")
    stale = _page_as_shown(first, bob)  # read while bob is not flagged

    assert _flag(second, bob) == 302  # a colleague flags bob
    assert Customer.objects.get(pk=bob.pk).requires_refund_approval

    stale["name"] = "Bob Builder"  # the first admin only corrects the name, on the page read before
    assert first.post(reverse("admin:tickets_customer_change", args=[bob.pk]), stale).status_code == 302
    bob.refresh_from_db()
    assert bob.name == "Bob Builder"
    assert bob.requires_refund_approval, "a page read before a colleague flagged bob un-flagged him on save"


def test_the_page_refuses_a_change_to_a_flag_a_colleague_changed_since_it_was_read():
    bob = make_customer("bob")
    first, second = _admin("first-admin"), _admin("second-admin")
    stale = _page_as_shown(first, bob)  # bob not flagged
    assert _flag(second, bob) == 302
    stale["requires_refund_approval"] = "on"
    stale["name"] = "Bob B."
    answer = first.post(reverse("admin:tickets_customer_change", args=[bob.pk]), stale)
    assert answer.status_code == 200 and "changed by someone else" in answer.content.decode()
    assert Customer.objects.get(pk=bob.pk).name != "Bob B.", "nothing is saved from a refused page"


def test_the_list_flags_only_the_selected_customers_and_logs_it():
    bob, carol = make_customer("bob"), make_customer("carol")
    first = _admin("first-admin")
    page = first.get(reverse(CHANGELIST))
    assert page.context["cl"].formset is None, "the customer list must not save every row's flag as it showed it"
    assert _flag(first, carol) == 302
    assert Customer.objects.get(pk=carol.pk).requires_refund_approval
    assert not Customer.objects.get(pk=bob.pk).requires_refund_approval
    assert LogEntry.objects.filter(object_id=str(carol.pk), change_message__contains="requires_refund_approval")


def test_staff_who_may_only_view_customers_cannot_flag_them():
    bob = make_customer("bob")
    viewer = get_user_model().objects.create_user("viewer", "v@example.test", "pw-viewer-123", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_customer"))
    client = Client()
    client.force_login(viewer)
    _flag(client, bob)
    assert not Customer.objects.get(pk=bob.pk).requires_refund_approval
