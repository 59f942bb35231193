"""A keyed call that crashes after its effect may have happened is reconciled, not recorded failed.

DESIGN.md invariant 5: a ``keyed`` call whose outcome is unknown is reconciled under its key, then
completed or run again under the same key. Here the provider pays the refund and the database
connection drops before the ledger records the answer: the call stays started, the failure is
counted, and the next pass asks the provider under the key and records the refund paid; the model
is told it succeeded, never that it failed.
"""

from __future__ import annotations

import json

import pytest
from django.db import OperationalError

from agents import refunds as refund_module
from agents.conversation import call_view
from agents.llm import ModelResponse, ToolCallRequest
from agents.models import AgentRun, CallStatus, RunStatus
from agents.runner import advance
from tests.agents.conftest import retry_time_comes
from tests.agents.test_money_gates import refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


class RefundThenSay:
    name = "refund-then-say"

    def __init__(self) -> None:
        self.told: list[str] = []

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        results = [m["content"] for m in messages if m["role"] == "tool"]
        if results:
            self.told.append(results[-1])
            return ModelResponse(text="Done.")
        args = {"order_number": "RV-1703", "amount_cents": 2000}
        return ModelResponse(text="", tool_calls=[ToolCallRequest("r1", "issue_refund", json.dumps(args))])


def test_a_refund_the_provider_paid_is_not_recorded_failed_after_a_database_blip(sandbox, monkeypatch):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "RV-1703", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $20 on RV-1703")

    record = refund_module._record_provider_state
    blips = {"left": 1}

    def connection_drops_once(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if blips["left"]:
            blips["left"] -= 1
            raise OperationalError("server closed the connection unexpectedly")
        return record(*args, **kwargs)

    monkeypatch.setattr(refund_module, "_record_provider_state", connection_drops_once)
    model = RefundThenSay()
    for _ in range(4):  # the run's retry after the failure, as the scheduled retry would
        outcome = advance(ticket.pk, model=model)
        if outcome.state != "retry":
            break
        retry_time_comes(ticket.pk)
    refund_module.reconcile_open_refunds(older_than_seconds=0)  # beat's reconciler

    assert [r["amount"] for r in paid(sandbox, order)] == [2000]  # the provider paid it
    (call,) = refund_calls(ticket)
    assert AgentRun.objects.get(ticket=ticket).status in {RunStatus.COMPLETED, RunStatus.HANDED_OFF}
    assert call.status == CallStatus.SUCCEEDED, (
        f"the refund the provider paid is recorded failed for good: {call.error!r}; "
        f"the model was told {model.told} and now reads {call_view(call)}"
    )
    assert '"succeeded"' in model.told[-1], model.told
