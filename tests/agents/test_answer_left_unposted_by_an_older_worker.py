"""No message lost: an answer stored but never posted (an older worker's ledger) that is not posted
after all, because a person took the ticket meanwhile, ends the run for the person.

The pass that finds a run whose last step is a final answer with no message posted posts it now.
When it cannot (a person took the ticket after the pass read it), the run was still marked
completed ("replied"): what it had taken in stayed answered, though nobody answered it, and after
the person handed the ticket back without a word the agent never answered it either.
"""

from __future__ import annotations

import pytest

from agents.lease import lease_acquire
from agents.llm import ModelResponse
from agents.models import AgentRun, RunStatus
from agents.pass_state import Pass
from agents.profiles import active_profile
from agents.runner import advance
from agents.selectors import tickets_with_agent_work
from agents.services import run_start, step_store
from tests.agents.test_hand_back import Answers, open_ticket
from tests.agents.test_money_path import public_words
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

STALE = "Your order shipped yesterday (stored by a worker that stopped before posting it)."
FRESH = "Your order is on its way."


def test_an_unposted_answer_a_person_stopped_leaves_the_question_to_the_agent_after_the_hand_back(
    person,  # noqa: ANN001
    monkeypatch,  # noqa: ANN001
):
    ticket = open_ticket()
    # An older worker took the message in and stored the final answer, then stopped before posting it.
    old = lease_acquire(ticket_id=ticket.pk, owner="older-worker")
    run = run_start(lease=old, ticket=ticket, model_name="answers", profile=active_profile())
    with old.guard():
        step_store(
            lease=old, run=run, index=0, attempt=1, model_name="answers", request_prefix=None,
            request_messages=[], response=ModelResponse(text=STALE),
        )  # fmt: skip
    old.release()

    # The pass that finds it has read the ticket (with the agent) when a person takes it over.
    load = Pass.load.__func__

    def taken_over_as_the_pass_loads(cls, lease, ticket_, run_):  # noqa: ANN001, ANN202
        ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
        monkeypatch.setattr(Pass, "load", classmethod(load))
        return load(cls, lease, ticket_, run_)

    monkeypatch.setattr(Pass, "load", classmethod(taken_over_as_the_pass_loads))
    advance(ticket.pk, model=Answers(STALE))
    assert STALE not in public_words(ticket)
    run.refresh_from_db()
    assert run.status != RunStatus.COMPLETED, "a run whose answer was never posted is recorded as replied"

    ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)  # without a word
    assert ticket.pk in tickets_with_agent_work(), "the customer's question is left to nobody"
    advance(ticket.pk, model=Answers(FRESH))
    assert public_words(ticket) == [FRESH]
    assert AgentRun.objects.filter(ticket=ticket).count() == 2
    assert not Message.objects.filter(
        ticket=ticket, author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True
    ).exists()
