"""A worker that dies after it finished a turn (its reply posted, its run completed, the lease not
yet released) is not counted as a failure of the next run, which it never carried.

README ("Never stuck"): after AGENT_MAX_CONSECUTIVE_FAILURES (3) failures in a row on one run the
ticket is parked with a person. A stop is counted against a run only when the stopped worker
carried it (an earlier lease worked on it): the customer's next question starts with none counted.
"""

from __future__ import annotations

import signal

import pytest

from agents.llm import ModelError, ModelResponse
from agents.models import AgentRun, RunStatus, TicketLease
from agents.runner import advance
from tests.agents.conftest import retry_time_comes
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(120)]


class HiccupsTwiceThenAnswers:
    name = "hiccups"

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        self.calls += 1
        if self.calls <= 2:
            raise ModelError("the model server is busy (503)", retryable=True, status_code=503)
        return ModelResponse(text="You can change the address until it ships.")


def test_a_worker_that_died_after_its_turn_does_not_count_against_the_next_run(cluster):  # noqa: ANN001
    customer = make_customer()
    make_order(customer, number="A-8818")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body="Where is my order A-8818?")

    # A real worker answers, completes its run, and is killed before it releases the lease.
    doomed = cluster.worker(faults="before_lease_release")
    doomed.wait_dead(timeout=60)
    assert doomed.popen.returncode == -signal.SIGKILL, doomed.log()
    first = AgentRun.objects.get(ticket=ticket)
    assert first.status == RunStatus.COMPLETED
    assert TicketLease.objects.get(ticket=ticket).owner  # never released

    # The customer asks something new; the model has two hiccups, then answers.
    ticket_services.message_post(
        ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, author_user=customer.user,
        body="Can I still change the address?", client_msg_id="c-address",
    )  # fmt: skip
    model = HiccupsTwiceThenAnswers()
    for _ in range(3):
        outcome = advance(ticket.pk, model=model)
        if outcome.state == "retry":
            retry_time_comes(ticket.pk)

    second = AgentRun.objects.exclude(pk=first.pk).get(ticket=ticket)
    failures = [e.payload["error"] for e in ticket.events.filter(kind="agent_step_failed", payload__run_id=second.pk)]
    assert not [f for f in failures if "worker carrying this run on stopped" in f], (
        f"a run no dead worker ever carried was charged with that worker's stop: {failures}"
    )
    assert second.status == RunStatus.COMPLETED, (
        f"after two model hiccups the new run is {second.status} ({second.outcome}); the ticket went to a person"
    )
    assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).count() == 2
