"""A model endpoint that reports an outage after answering HTTP 200 is waited out, not parked.

Once an answer has begun, OpenRouter sends what went wrong as an event of the stream (``{"error":
{"code": 502, ...}}``: the upstream model is down) and OpenAI as one of ``type: "server_error"``.
The adapter read such an event as a failure of the ticket (no status), so three of them in a row,
a few seconds of an upstream outage, parked the ticket with a person ("something went wrong on our
side") where the same outage answered as an HTTP 502 was waited out for AGENT_OUTAGE_PATIENCE_SECONDS
and the customer answered once the model was back. So it was with gateways that answer HTTP 200
with ``{"error": {...}}`` as the whole body, and proxies that answer with a web page of their own.
"""

from __future__ import annotations

import pytest

from agents.models import AgentRun, RunStatus
from agents.runner import advance
from agents.services import PARKED_NOTE
from tests.agents.conftest import retry_time_comes
from tests.agents.test_openai_adapter import make_model
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)


# An upstream down, as each kind of server reports it once it has answered HTTP 200.
OUTAGES_WITH_200 = {
    # OpenRouter: an event of the stream, its code the status the error would have had.
    "event in the stream": lambda server: server.enqueue_error_mid_stream(
        "Let", {"code": 502, "message": "Upstream model is down"}
    ),
    # Gateways that answer 200 whatever the upstream did, with {"error": {...}} as the whole body.
    "error body": lambda server: server.enqueue_error_with_200({"code": 503, "message": "No upstream available"}),
    # A proxy or captive portal in front of the model, with a web page of its own.
    "web page": lambda server: server.enqueue_page("<html><body><h1>502 Bad Gateway</h1></body></html>"),
}


@pytest.mark.parametrize("answer", list(OUTAGES_WITH_200))
def test_an_upstream_down_reported_with_http_200_is_waited_out_and_the_customer_answered(
    openai_server, settings, answer
):
    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Hello", body="Are you open on Sunday?")
    model = make_model(openai_server, max_retries=0)
    for _ in range(4):
        OUTAGES_WITH_200[answer](openai_server)
        assert advance(ticket.pk, model=model).state == "retry"
        ticket.refresh_from_db()
        assert ticket.status != TicketStatus.WITH_HUMAN, "parked during a few seconds of an upstream outage"
        retry_time_comes(ticket.pk)

    openai_server.enqueue_text("Yes, from 10 to 4.")
    assert advance(ticket.pk, model=model).state == RunStatus.COMPLETED
    assert list(Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).values_list("body", flat=True)) == [
        "Yes, from 10 to 4."
    ]
    assert not Message.objects.filter(ticket=ticket, body=PARKED_NOTE).exists()
    assert AgentRun.objects.get(ticket=ticket).failures == 0
