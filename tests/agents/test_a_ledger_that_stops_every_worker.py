"""A run whose ledger stops every worker that reads it (a conversation too large for the worker's
memory, a crash in a library) is counted and parked with a person, not taken on forever.

The worker that stopped is counted before the next one reads the ledger: a stop during that
reading is counted too, and at the limit the run is parked without reading it again.
"""

from __future__ import annotations

import pytest

from agents.models import AgentRun, ReplayPolicy, RunStatus
from agents.pass_state import Pass
from agents.tools import REGISTRY, Tool
from tests.agents.conftest import CallsThenReplies, WorkerDied, rung_again_and_again
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Message, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_ledger_whose_reading_stops_every_worker_is_parked_with_a_person(monkeypatch, settings):
    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    settings.AGENT_LEASE_SECONDS = 600

    def lookup(ctx, args):  # noqa: ANN001, ANN202 - the first worker stops during the call
        raise WorkerDied()

    def hit(point: str) -> None:  # a stopped worker releases nothing: its lease is taken over
        if point == "before_lease_release":
            raise WorkerDied()

    monkeypatch.setattr("agents.faults.hit", hit)

    monkeypatch.setitem(
        REGISTRY,
        "lookup",
        Tool(name="lookup", description="", parameters={"type": "object"}, replay_policy=ReplayPolicy.SAFE,
             handler=lookup),
    )  # fmt: skip
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Look it up")
    assert rung_again_and_again(ticket.pk, CallsThenReplies("lookup", reply="Looked it up."), rings=1) == 1
    reads = []

    def reading_stops_the_worker(self):  # noqa: ANN001, ANN202 - every later worker stops reading the ledger
        reads.append(self.lease.epoch)
        raise WorkerDied()

    monkeypatch.setattr(Pass, "reload", reading_stops_the_worker)

    deaths = rung_again_and_again(
        ticket.pk, CallsThenReplies("lookup", reply="Looked it up."), rings=8, until_settled=True
    )

    ticket.refresh_from_db()
    run = AgentRun.objects.get(ticket=ticket)
    assert run.status == RunStatus.FAILED and ticket.status == TicketStatus.WITH_HUMAN, (
        f"a ledger that stopped {deaths} worker(s) is still taken on: run {run.status} failures={run.failures}; "
        f"ticket {ticket.status}"
    )
    assert len(reads) == settings.AGENT_MAX_CONSECUTIVE_FAILURES, f"the ledger was read {len(reads)} time(s)"
    assert Message.objects.filter(ticket=ticket, client_msg_id=f"parked:{run.pk}").exists()
