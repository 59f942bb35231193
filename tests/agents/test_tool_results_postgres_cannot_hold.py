"""A tool's result or error holding what PostgreSQL cannot store (NUL characters, lone surrogates)
is stored without them, and the turn goes on: the customer is answered, not parked with a person.

Tools are where the product is extended (a deployment adds its own lookups), and what they read
from elsewhere (a legacy system, a file, a provider's error message) may hold such characters.
The model's own text and arguments are already cleaned or refused (agents.llm, agents.tools).
"""

from __future__ import annotations

import pytest

from agents.models import AgentRun, CallStatus, ReplayPolicy, RunStatus, ToolCall
from agents.runner import advance
from agents.tools import REGISTRY, Tool, ToolError
from tests.agents.conftest import CallsThenReplies, retry_time_comes
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, Ticket, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)

NUL_RESULT = {"note": "bad\x00byte", "lone": "half \ud800 a pair", "list": ["x\x00"], "key\x00": 1}


def _tool(name: str, policy: str, handler) -> Tool:  # noqa: ANN001
    return Tool(
        name=name,
        description="A deployment's own lookup.",
        parameters={"type": "object"},
        replay_policy=policy,
        handler=handler,
    )


def _returns(ctx, args):  # noqa: ANN001, ANN202
    return NUL_RESULT


def _refuses(ctx, args):  # noqa: ANN001, ANN202
    raise ToolError("the legacy system said: no\x00such \ud800 record")


@pytest.mark.parametrize("policy", [ReplayPolicy.SAFE, ReplayPolicy.NEVER])
@pytest.mark.parametrize("handler", [_returns, _refuses], ids=["result", "error"])
def test_the_call_is_stored_clean_and_the_customer_answered(monkeypatch, policy, handler):  # noqa: ANN001
    monkeypatch.setitem(REGISTRY, "legacy_lookup", _tool("legacy_lookup", policy, handler))
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Look me up")

    advance(ticket.pk, model=CallsThenReplies("legacy_lookup", reply="Here is what I found."))

    call = ToolCall.objects.get(ticket=ticket, name="legacy_lookup")
    if handler is _returns:
        assert call.status == CallStatus.SUCCEEDED
        assert call.result == {"note": "badbyte", "lone": "half \ufffd a pair", "list": ["x"], "key": 1}
    else:
        assert call.status == CallStatus.FAILED
        assert call.error == "the legacy system said: nosuch \ufffd record"
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.COMPLETED
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WAITING_ON_CUSTOMER
    replies = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).values_list("body", flat=True)
    assert list(replies) == ["Here is what I found."]


def test_a_tool_that_crashes_with_such_words_is_counted_and_parked(monkeypatch):  # noqa: ANN001
    """A keyed call (it may have happened) that crashes is tried again; its failures are counted,
    each one's error kept (cleaned), until the ticket is parked with a person: a failure whose
    record could not be written would be retried for ever."""

    def crashes(ctx, args):  # noqa: ANN001, ANN202
        # (NUL only: a lone surrogate in a logged traceback cannot cross to pytest-xdist's controller)
        raise RuntimeError("the legacy system fell over: \x00!")

    monkeypatch.setitem(REGISTRY, "legacy_lookup", _tool("legacy_lookup", ReplayPolicy.KEYED, crashes))
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Look me up")

    for _ in range(10):
        if advance(ticket.pk, model=CallsThenReplies("legacy_lookup")).state == "retry":
            retry_time_comes(ticket.pk)
        if Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN:
            break

    run = AgentRun.objects.get(ticket=ticket)
    assert run.status == RunStatus.FAILED
    assert run.failures >= 1
    assert "the legacy system fell over: !" in run.last_error
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN
