"""A model step that stops its worker every time, before the first token is streamed, is not asked forever.

Invariant 14: nothing retries forever. A model request that kills its worker before any token (an
out-of-memory on a huge conversation, a native crash in the HTTP/TLS stack, the hard task time
limit on a model that never answers) leaves no stream buffer, no step row and no call. Each take-
over from a worker that stopped without releasing the run counts a failure in a row
(recovery._owner_stopped); at the limit the ticket is parked with a person.

Each worker death is emulated in-process: the model raises a BaseException (nothing in the loop
catches it), and the lease's release does only what a dead connection does, drop the advisory lock
(the row stays the dead owner's, so the next worker takes it over as after a SIGKILL).
"""

from __future__ import annotations

import pytest
from django.db import connection

from agents.lease import Lease
from agents.models import AgentRun, ModelStep
from agents.runner import advance
from agents.selectors import tickets_with_agent_work
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)


class WorkerKilled(BaseException):
    """SIGKILL, as seen from inside the process: nothing after it runs."""


class KillsItsWorker:
    name = "kills-its-worker"

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        raise WorkerKilled()


def _dead_connection_release(self: Lease, **kwargs: object) -> None:
    self.stop_heartbeat()
    with connection.cursor() as cursor:  # the session ends: PostgreSQL drops its advisory locks
        cursor.execute("SELECT pg_advisory_unlock_all()")
    self.locked = False


def test_a_model_step_that_kills_every_worker_is_not_asked_forever(settings, monkeypatch):
    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    monkeypatch.setattr(Lease, "release", _dead_connection_release)
    monkeypatch.setattr(Lease, "unlock", lambda self: _dead_connection_release(self))
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Where is my order?")

    deaths = 0
    for _ in range(10):  # the sweeper rings it every few seconds while it has work
        if ticket.pk not in tickets_with_agent_work():
            break
        try:
            advance(ticket.pk, model=KillsItsWorker())
        except WorkerKilled:
            deaths += 1

    ticket.refresh_from_db()
    runs = list(AgentRun.objects.filter(ticket=ticket).values_list("status", "failures", "epochs"))
    assert ticket.pk not in tickets_with_agent_work(), (
        f"{deaths} workers died on the same model step and the sweeper still rings the ticket "
        f"(ticket {ticket.status}; runs (status, failures, epochs) = {runs}; "
        f"model steps recorded: {ModelStep.objects.filter(ticket=ticket).count()})"
    )
    assert ticket.status == TicketStatus.WITH_HUMAN
