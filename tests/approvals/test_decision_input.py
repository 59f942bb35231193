"""a decision POST with an invalid value gets a clear 4xx, like every other refusal of the form."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.llm import ModelResponse, ToolCallRequest, Usage
from agents.models import ReplayPolicy, RunStatus
from agents.runner import advance
from agents.tools import REGISTRY, Tool
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = pytest.mark.django_db(transaction=True)


class AsksForIt:
    name = "asks-for-it"

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        return ModelResponse(
            text="", tool_calls=[ToolCallRequest("a1", "gated_x", "{}")], usage=Usage(10, 5), finish_reason="tool_calls"
        )


def waiting_for_a_decision(monkeypatch) -> tuple[ApprovalRequest, Client]:  # noqa: ANN001
    """A ticket paused on a call staff approve every one of, and an approver's client."""
    monkeypatch.setitem(
        REGISTRY,
        "gated_x",
        Tool(name="gated_x", description="", parameters={"type": "object"}, replay_policy=ReplayPolicy.KEYED,
             handler=lambda ctx, args: {"ok": True}, needs_approval=lambda ctx, args: "staff approve every one"),
    )  # fmt: skip
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Do it")
    assert advance(ticket.pk, model=AsksForIt()).state == RunStatus.WAITING_APPROVAL
    client = Client()
    client.force_login(make_staff("approver-x", can_decide=True))
    return ApprovalRequest.objects.get(ticket=ticket), client


@pytest.mark.parametrize("posted", [{"decision": "maybe"}, {}, {"decision": "APPROVE"}], ids=["maybe", "none", "caps"])
def test_an_invalid_decision_is_a_400_with_the_reason_and_changes_nothing(monkeypatch, posted):
    approval, client = waiting_for_a_decision(monkeypatch)

    response = client.post(f"/staff/approvals/{approval.pk}/decide/", posted)

    assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING
    assert response.status_code == 400, f"{response.status_code} {response.get('Location', '')}"
    assert "Choose approve or reject" in response.content.decode()
