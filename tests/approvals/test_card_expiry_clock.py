"""How long an approval has waited and how long it has left are told on the database's clock.

A request's times are written on the database's clock (approvals.services), so that every host
expires it at the same moment. The card measured them against the clock of the web server that drew
it: on many hosts, a web server three hours ahead told staff a fresh request had waited three hours
and had three hours fewer than it has; one ten minutes behind told them it expired ten minutes
later than it does. Staff choosing which request to decide first read the time left.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.agents.test_backoff_clock import on_a_host_whose_clock_is_off
from tests.approvals.test_dashboard_cards import dashboard, paused
from tests.approvals.test_dashboard_cards import part as card_part

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.mark.parametrize("off", [timedelta(hours=3), timedelta(minutes=-10)], ids=["ahead", "behind"])
def test_a_web_host_whose_clock_is_off_tells_the_time_left_on_the_database_clock(
    sandbox, client, approver, monkeypatch, off
):  # noqa: ANN001
    _, approval = paused(sandbox, "E-5911")
    assert approval.expires_at - approval.requested_at == timedelta(days=3)  # the policy's default
    client.force_login(approver)

    on_a_host_whose_clock_is_off(monkeypatch, off)
    meta = card_part(dashboard(client), approval, r'<p class="muted" data-live="meta">(.*?)</p>')

    assert "waiting 0 minutes" in meta, meta
    assert "expires in 2 days, 23 hours" in meta, meta
