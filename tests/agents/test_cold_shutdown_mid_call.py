"""A worker shut down cold in the middle of a call leaves it as a dead worker does (DESIGN.md,
invariants 5 and 15).

Celery's cold shutdown (a second Ctrl-C, SIGQUIT, a deploy's impatient stop) raises SystemExit
(``WorkerTerminate``) inside the task a solo or threads worker is running: here, after the email
tool's message went out and before its outcome was written. The pass's ``finally`` released the
lease as after a finished pass, so the worker that took the ticket next did not know its owner had
stopped: nothing was recovered, the ``never`` call left ``started`` was run again, and the customer
got the email twice (and a call that shuts its worker down every time was never counted). Now a
pass that ends in an exception that is no failure of its own (the process going down) leaves the
lease owned, as a killed worker does: its advisory lock goes, the next worker takes the lease over
from a stopped owner, and recovery marks the call uncertain instead of sending it again.
"""

from __future__ import annotations

import dataclasses

import pytest
from celery.exceptions import WorkerTerminate
from django.core import mail
from django.db import connection

from agents.llm import ModelResponse, ToolCallRequest, Usage
from agents.models import AgentRun, CallStatus, RunStatus, ToolCall
from agents.runner import advance
from agents.tools import REGISTRY
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = pytest.mark.django_db(transaction=True)


class EmailsThenReplies:
    name = "emails-then-replies"

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN201
        if any(m["role"] == "tool" for m in messages):
            return ModelResponse(text="I have emailed you the details.")
        args = '{"subject": "Your order", "body": "Here are the details."}'
        call = ToolCallRequest("c1", "notify_customer_by_email", args)
        return ModelResponse(text="", tool_calls=[call], usage=Usage(10, 5), finish_reason="tool_calls")


def test_a_cold_shutdown_after_an_email_went_out_does_not_send_it_again(monkeypatch):
    tool = REGISTRY["notify_customer_by_email"]

    def sends_then_the_worker_is_shut_down(ctx, args):  # noqa: ANN001, ANN202
        tool.handler(ctx, args)
        raise WorkerTerminate(1)  # raised by Celery's cold shutdown in the running task

    monkeypatch.setitem(REGISTRY, tool.name, dataclasses.replace(tool, handler=sends_then_the_worker_is_shut_down))
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Email me the details")
    model = EmailsThenReplies()

    with pytest.raises(WorkerTerminate):
        advance(ticket.pk, model=model)
    connection.close()  # the process exits: its session ends with it
    assert len(mail.outbox) == 1

    monkeypatch.setitem(REGISTRY, tool.name, tool)  # a fresh worker
    outcome = advance(ticket.pk, model=model)

    call = ToolCall.objects.get(ticket=ticket)
    assert len(mail.outbox) == 1, f"the email went out {len(mail.outbox)} times; call {call.status}"
    assert call.status == CallStatus.UNCERTAIN, call.error
    run = AgentRun.objects.get(ticket=ticket)
    assert outcome.state == RunStatus.COMPLETED and run.status == RunStatus.COMPLETED
    # The model was told the email may have gone out, and the stop was counted like any other.
    assert [entry["tool"] for entry in run.recovery_notes[-1]["uncertain"]] == ["notify_customer_by_email"]
    assert ticket.events.filter(kind="agent_step_failed", payload__run_id=run.pk).count() == 1
