"""A customer a colleague flagged "every refund reviewed" stays flagged whatever a list read before says.

"Stop reviewing every refund of the selected customers", with "Select all" on the list of flagged customers,
acted on the list as it is when the action is sent, not as it was read: a customer a colleague flagged in
between (a suspected fraud) was unflagged with the others, and their next refunds were paid unreviewed. The
list carries when it was read; a customer whose flag someone changed since is left as it is, and named.
"""

from __future__ import annotations

import re

import pytest
from django.contrib import messages
from django.contrib.auth import get_user_model
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


def _hidden(page: str, name: str) -> str:
    found = re.search(rf'<input type="hidden" name="{name}" value="([^"]*)"', page)
    return found.group(1) if found else ""


@pytest.mark.parametrize("select_all", [True, False])
def test_a_stale_list_does_not_unflag_a_customer_a_colleague_flagged_since(select_all):
    cleared, suspect = make_customer("cleared", flagged=True), make_customer("suspect")
    first, second = _admin("first-admin"), _admin("second-admin")
    # "Select all" on the flagged customers; or every row of the whole list ticked.
    shown = {"requires_refund_approval__exact": "1"} if select_all else {}
    listed = first.get(reverse(CHANGELIST), shown).content.decode()
    assert "cleared" in listed and ("suspect" in listed) != select_all

    second.post(reverse(CHANGELIST), {"action": "review_every_refund", "_selected_action": [suspect.pk]})
    assert Customer.objects.get(pk=suspect.pk).requires_refund_approval

    chosen = {"select_across": "1", "_selected_action": [cleared.pk]} if select_all else {}
    answer = first.post(
        reverse(CHANGELIST) + ("?requires_refund_approval__exact=1" if select_all else ""),
        {
            "action": "stop_reviewing_every_refund",
            "listed": _hidden(listed, "listed"),
            "_selected_action": [cleared.pk, suspect.pk],
            **chosen,
        },
        follow=True,
    )

    assert not Customer.objects.get(pk=cleared.pk).requires_refund_approval
    assert Customer.objects.get(pk=suspect.pk).requires_refund_approval, "a colleague's flag was undone unseen"
    said = [(m.level, m.message) for m in answer.context["messages"]]
    assert any(level == messages.WARNING and "suspect" in text for level, text in said), said


def test_a_list_read_after_the_colleagues_flag_unflags_as_asked():
    suspect = make_customer("suspect", flagged=True)
    first = _admin("first-admin")
    listed = first.get(reverse(CHANGELIST)).content.decode()

    first.post(
        reverse(CHANGELIST),
        {
            "action": "stop_reviewing_every_refund",
            "listed": _hidden(listed, "listed"),
            "_selected_action": [suspect.pk],
        },
    )

    assert not Customer.objects.get(pk=suspect.pk).requires_refund_approval


def test_review_every_refund_from_a_stale_list_still_flags_a_customer_a_colleague_unflagged_since():
    suspect = make_customer("suspect")
    first, second = _admin("first-admin"), _admin("second-admin")
    listed = first.get(reverse(CHANGELIST)).content.decode()
    second.post(reverse(CHANGELIST), {"action": "review_every_refund", "_selected_action": [suspect.pk]})
    second.post(reverse(CHANGELIST), {"action": "stop_reviewing_every_refund", "_selected_action": [suspect.pk]})

    first.post(
        reverse(CHANGELIST),
        {"action": "review_every_refund", "listed": _hidden(listed, "listed"), "_selected_action": [suspect.pk]},
    )

    assert Customer.objects.get(pk=suspect.pk).requires_refund_approval, "a review asked for was not set"
