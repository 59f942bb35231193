"""An approval policy's lengths of time are ones a date can be counted with.

The profile page (and the Approval policy page) took any positive whole number for an approval's expiry
(``ttl_hours``, and the reminder before it) and the customer's rolling window (``customer_window_days``),
up to PostgreSQL's integer limit. A request's expiry is counted from now, and the window back from now:
100,000,000 hours lands past the year 9999, and Python cannot hold that date (OverflowError). A refund
needing an approval then failed where its request was written, and a small one where the customer's
window was read: each step failed with the OverflowError, and no request was written. Such values are
refused on the page, naming the field and the longest allowed.
"""

from __future__ import annotations

import pytest

from agents.models import AgentRun, ApprovalPolicy
from agents.profiles import active_profile
from agents.runner import advance
from approvals.models import ApprovalRequest
from tests.agents.conftest import retry_time_comes
from tests.agents.test_profile_form_checks_values import _save_policy_in_the_admin
from tests.approvals.test_approvals import refund_ticket
from tests.approvals.test_policy_page_keeps_profile_rules import policy_page

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.mark.parametrize(
    "values",
    [{"ttl_hours": 100_000_000}, {"customer_window_days": 5_000_000}],
    ids=["expiry-hours", "window-days"],
)
def test_a_length_of_time_no_date_can_hold_is_refused_on_the_profile_page(admin_client, sandbox, values):  # noqa: ANN001
    admin_client.raise_request_exception = False
    before = active_profile()

    response = _save_policy_in_the_admin(admin_client, **values)

    if response.status_code == 302:  # saved: what a refund needing an approval then meets
        # Above the threshold (a request is written), or a small one (the customer's window is read).
        ticket, _ = refund_ticket(sandbox, **({} if "ttl_hours" in values else {"total_cents": 1500}))
        for _ in range(3):
            advance(ticket.pk)
            retry_time_comes(ticket.pk)
        runs = list(AgentRun.objects.filter(ticket=ticket).values_list("status", "last_error"))
        asked = ApprovalRequest.objects.filter(ticket=ticket).count()
        pytest.fail(f"the profile page saved {values} as the active version; a refund then: runs {runs}, "
                    f"{asked} approval request(s)")  # fmt: skip
    name = next(iter(values))
    assert response.status_code == 200 and name in str(response.context["adminform"].form.errors)
    assert active_profile().pk == before.pk


def test_the_approval_policy_page_refuses_an_expiry_no_date_can_hold(admin_client, db):  # noqa: ANN001
    admin_client.raise_request_exception = False
    before = active_profile()
    data = {**policy_page(admin_client), "ttl_hours": 100_000_000}

    response = admin_client.post(f"/admin/agents/approvalpolicy/{ApprovalPolicy.current().pk}/change/", data)

    assert response.status_code == 200, f"saved ({response.status_code}): version {active_profile().version}"
    assert "ttl_hours" in str(response.context["adminform"].form.errors) or "ttl_hours" in response.content.decode()
    assert active_profile().pk == before.pk and ApprovalPolicy.current().ttl_hours != 100_000_000
