"""A decision sent from the approval dashboard after the session had ended leads to sign in and then
back to the dashboard: ``next`` was the POST-only decide URL, and signing in landed on a bare 405."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.staff.conftest import make_support_staff
from tests.staff.test_signed_out_action_leads_back import _sign_in_after

pytestmark = pytest.mark.django_db


def test_signing_in_after_a_decision_sent_while_signed_out_leads_back_to_the_dashboard(db):  # noqa: ANN001
    make_support_staff("maria")
    browser = Client()

    landed = _sign_in_after(browser, browser.post("/staff/approvals/1/decide/", {"decision": "reject"}))

    assert landed.status_code == 200
    assert landed.request["PATH_INFO"] == reverse("approvals:dashboard")
