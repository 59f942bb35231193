"""A worker that stops during a call (a deploy restart, an OOM kill of a neighbour) is a failure of the
run, counted in a row: a call run again successfully by the next worker is progress and resets the
count. Three separate stops in one run, each followed by a successful rerun, do not park the ticket."""

from __future__ import annotations

import pytest

from agents.llm import ModelResponse, ToolCallRequest, Usage
from agents.models import AgentRun, CallStatus, ReplayPolicy, RunStatus, ToolCall
from agents.tools import REGISTRY, Tool
from tests.agents.conftest import WorkerDied, rung_again_and_again
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)


class ThreeLookups:
    name = "three-lookups"

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        done = sum(1 for m in messages if m["role"] == "tool")
        if done >= 3:
            return ModelResponse(text="All looked up.")
        return ModelResponse(
            text="",
            tool_calls=[ToolCallRequest(f"l{done}", f"lookup_{done}", "{}")],
            usage=Usage(10, 5),
            finish_reason="tool_calls",
        )


def test_three_deploy_restarts_each_followed_by_a_successful_rerun_do_not_park_the_ticket(monkeypatch, settings):
    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    settings.AGENT_LEASE_SECONDS = 600
    state = {"dying": False, "killed": set()}

    def make(name: str):  # noqa: ANN202
        def handler(ctx, args):  # noqa: ANN001, ANN202
            if name not in state["killed"]:  # the first worker to run it is killed by a deploy
                state["killed"].add(name)
                state["dying"] = True
                raise WorkerDied()
            return {"ok": name}

        return Tool(name=name, description="", parameters={"type": "object"}, replay_policy=ReplayPolicy.SAFE,
                    handler=handler)  # fmt: skip

    for n in range(3):
        monkeypatch.setitem(REGISTRY, f"lookup_{n}", make(f"lookup_{n}"))

    def hit(point: str) -> None:
        if point == "before_lease_release" and state["dying"]:
            raise WorkerDied()

    monkeypatch.setattr("agents.faults.hit", hit)
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Look up three things")
    deaths = rung_again_and_again(
        ticket.pk, ThreeLookups(), rings=10, before_each=lambda: state.update(dying=False), until_settled=True
    )

    ticket.refresh_from_db()
    run = AgentRun.objects.get(ticket=ticket)
    calls = list(ToolCall.objects.filter(ticket=ticket).order_by("pk").values_list("name", "status", "attempts"))
    assert deaths == 3
    assert run.status == RunStatus.COMPLETED and ticket.status != TicketStatus.WITH_HUMAN, (
        f"three worker deaths, each call run again successfully, parked the ticket: run {run.status} "
        f"failures={run.failures} last_error={run.last_error!r}; ticket {ticket.status}; calls {calls}"
    )
    assert all(status == CallStatus.SUCCEEDED for _, status, _ in calls)
