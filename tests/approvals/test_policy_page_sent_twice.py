"""The approval policy page sent twice (a double click on Save, a browser sending the form again after
a slow answer) is saved once: the second was refused with "The agent profile changed since this page
was opened ... make your change again", the change it asked to make again being the person's own,
already saved. It makes no second profile version either."""

from __future__ import annotations

import re

import pytest

from agents.models import ApprovalPolicy
from agents.profiles import active_profile
from tests.approvals.test_policy_page_keeps_profile_rules import edit_reminder_hours_in_admin, policy_page

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_the_same_policy_page_sent_twice_is_saved_once_without_a_refusal(admin_client):  # noqa: ANN001
    page = policy_page(admin_client)

    first = edit_reminder_hours_in_admin(admin_client, page)
    again = edit_reminder_hours_in_admin(admin_client, page)

    assert first.status_code == 302
    assert again.status_code == 302, re.findall(r"<li>(.*?)</li>", again.content.decode())
    assert active_profile().version == 2  # one version for one change
    assert active_profile().approval_policy["reminder_before_hours"] == 6
    assert ApprovalPolicy.current().reminder_before_hours == 6


def test_a_page_read_before_a_colleagues_other_change_is_still_refused(admin_client):  # noqa: ANN001
    mine = policy_page(admin_client)
    colleague = {**policy_page(admin_client), "ttl_hours": 24}
    assert edit_reminder_hours_in_admin(admin_client, colleague).status_code == 302  # their change, saved

    url = f"/admin/agents/approvalpolicy/{ApprovalPolicy.current().pk}/change/"
    refused = admin_client.post(url, {**mine, "reminder_before_hours": 3})

    assert refused.status_code == 200
    assert "The agent profile changed since this page was opened" in refused.content.decode()
    assert ApprovalPolicy.current().ttl_hours == 24 and ApprovalPolicy.current().reminder_before_hours == 6
