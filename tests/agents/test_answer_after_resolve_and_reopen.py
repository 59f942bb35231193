"""Staff resolve a ticket while the agent writes its answer, and the customer writes again (reopening
it) before the answer is stored.

README, "A person's decision ends the agent's part": resolving a ticket ends the agent's run on it
at once; if the customer writes again and reopens it, the agent answers in a new run. The answer
the ended run was writing is never posted (its words were not streamed either), and the run ends
handed to the person, not completed as if it had answered.
"""

from __future__ import annotations

import pytest

from agents.llm import ModelResponse
from agents.models import AgentRun, RunStatus
from agents.runner import advance
from tests.agents.test_money_path import public_words
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

STALE = "Your order shipped yesterday (written before a person resolved the ticket)."
FRESH = "Happy to help with that too."


class Answers:
    name = "answers"

    def __init__(self, text: str, meanwhile=None) -> None:  # noqa: ANN001
        self.text, self.meanwhile = text, meanwhile

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        if self.meanwhile is None:
            return ModelResponse(text=FRESH)  # a later request: the answer to the new message
        self.meanwhile()
        self.meanwhile = None
        return ModelResponse(text=self.text)


def test_an_answer_written_before_a_resolve_is_not_posted_after_the_customer_reopens(person):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body="Where is my order?")

    def resolved_then_reopened() -> None:
        ticket_services.ticket_resolve(ticket=ticket.pk, user=person)
        ticket_services.message_post(
            ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, author_user=customer.user,
            body="One more thing: can I change the address?", client_msg_id="c-reopen",
        )  # fmt: skip

    outcome = advance(ticket.pk, model=Answers(STALE, meanwhile=resolved_then_reopened))
    assert outcome.more_work  # the task rings again for the new message
    advance(ticket.pk, model=Answers(STALE))

    first = AgentRun.objects.filter(ticket=ticket).order_by("pk").first()
    assert STALE not in public_words(ticket), "the answer of a run a person ended was posted after the reopen"
    assert first.status == RunStatus.HANDED_OFF, f"the run a person ended by resolving went on to {first.status}"
    assert public_words(ticket) == [FRESH], "the customer's new message is answered once, by a new run"
