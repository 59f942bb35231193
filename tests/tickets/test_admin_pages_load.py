"""Every page of the operations admin loads with realistic data (a paused approval, an uncertain refund, a
parked ticket), and odd search, filter, ordering and page input never gives a 500."""

from __future__ import annotations

import pytest
from django.contrib import admin

from agents.models import AgentRun, Refund, RefundStatus
from agents.runner import advance
from tests.agents.test_money_gates import Refunds
from tests.agents.test_money_path import order_for
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(300),
]

ODD = [
    "",
    "%",
    "'",
    "\\",
    "_",
    "abc",
    "-1",
    "#",
    "#-1",
    "99999999999999999999999",
    "é",
    "a" * 300,
    "1 2",
    "T-",
    "\x00",
    "12\x00",
]


def _data(sandbox):
    customer = make_customer()
    order_for(customer, "Z-1001", 50000, sandbox)
    # paused approval
    t1, _ = ticket_services.ticket_open(customer=customer, subject="big refund", body="Refund Z-1001 please")
    advance(t1.pk, model=Refunds(("Z-1001", 30000)))
    # refund uncertain: a small refund, then mark it uncertain directly
    t2, _ = ticket_services.ticket_open(customer=customer, subject="small refund", body="Refund Z-1001 please")
    advance(t2.pk, model=Refunds(("Z-1001", 1000)))
    Refund.objects.filter(ticket=t2).update(status=RefundStatus.UNCERTAIN)

    # parked ticket
    class Boom:
        name = "boom"

        def complete(self, *, messages, tools, on_token=None):
            from agents.llm import ModelError

            raise ModelError("model exploded <script>x</script>", retryable=False)

    t3, _ = ticket_services.ticket_open(customer=customer, subject="parked", body="hi")
    advance(t3.pk, model=Boom())
    return [t1, t2, t3]


def test_every_admin_page_loads_with_realistic_data(admin_client, sandbox):
    _data(sandbox)
    assert AgentRun.objects.filter(status="waiting_approval").exists()
    assert AgentRun.objects.filter(status="failed").exists()
    failures = []
    for model, _model_admin in admin.site._registry.items():
        meta = model._meta
        base = f"/admin/{meta.app_label}/{meta.model_name}/"
        for q in ODD:
            r = admin_client.get(base, {"q": q})
            if r.status_code >= 500:
                failures.append((base, "q", repr(q), r.status_code))
        for params in [
            {"status": "zzz"},
            {"status__exact": "zzz"},
            {"o": "99"},
            {"p": "abc"},
            {"agent_failing": "x"},
            {"ticket__id__exact": "abc"},
            {"e": "1"},
        ]:
            r = admin_client.get(base, params)
            if r.status_code >= 500:
                failures.append((base, params, r.status_code))
        for obj in model.objects.all()[:20]:
            for suffix in ["change/", "history/", "delete/"]:
                r = admin_client.get(f"{base}{obj.pk}/{suffix}")
                if r.status_code >= 500:
                    failures.append((base, obj.pk, suffix, r.status_code))
        r = admin_client.get(f"{base}abc/change/")
        if r.status_code >= 500:
            failures.append((base, "abc", r.status_code))
    assert failures == []
