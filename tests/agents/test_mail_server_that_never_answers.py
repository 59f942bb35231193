"""A mail server that accepts the connection and never answers does not hold the ticket.

No EMAIL_TIMEOUT was set, so the ``notify_customer_by_email`` tool waited on Django's SMTP backend
forever, while the worker's heartbeat renewed the lease and its session kept the advisory lock: no
other worker could take the ticket over, and nothing but a hard time limit (none under a solo or
threads pool) ended it. Now the send gives up after EMAIL_TIMEOUT (10 s by default) and the step
fails like any tool failure: the email is marked uncertain (never sent again automatically), and
the ticket is free for the retry.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agents.lease import lease_acquire
from agents.llm import ModelResponse, ToolCallRequest, Usage
from agents.models import CallStatus, ToolCall
from agents.runner import advance
from tests.conftest import make_customer, silent_server
from tickets import services as ticket_services

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def silent_smtp() -> Iterator[int]:
    """A port that accepts connections and never says a word (no "220" greeting)."""
    with silent_server() as (port, _):
        yield port


class EmailsThenReplies:
    """Asks to email the customer a summary; once the result is in, replies."""

    name = "emails-then-replies"

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN201
        if any(m["role"] == "tool" for m in messages):
            return ModelResponse(text="I could not confirm the email went out.")
        call = ToolCallRequest("e1", "notify_customer_by_email", '{"subject": "Your request", "body": "Summary"}')
        return ModelResponse(text="", tool_calls=[call], usage=Usage(10, 5), finish_reason="tool_calls")


@pytest.mark.timeout(60)
def test_an_email_to_a_mail_server_that_never_answers_gives_up_and_leaves_the_ticket_free(silent_smtp, settings):
    assert isinstance(settings.EMAIL_TIMEOUT, float) and settings.EMAIL_TIMEOUT <= 60, (
        f"EMAIL_TIMEOUT is {settings.EMAIL_TIMEOUT!r}: a mail server that never answers holds the ticket forever"
    )
    settings.EMAIL_TIMEOUT = 1.0  # the configured bound, shortened for the test
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", silent_smtp
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Email me a summary")

    outcome = advance(ticket.pk, model=EmailsThenReplies())

    assert outcome.state == "retry"
    call = ToolCall.objects.get(ticket=ticket, name="notify_customer_by_email")
    # It may have reached the server before the silence: marked so, and not sent again automatically.
    assert call.status == CallStatus.UNCERTAIN and "timed out" in call.error
    taken = lease_acquire(ticket_id=ticket.pk, owner="another-worker")
    assert taken is not None, "the ticket is still held after the send gave up"
    taken.release()
