"""An email that may have gone out is not sent again by the agent on its own.

``notify_customer_by_email`` is a ``never`` call: SMTP cannot deduplicate. A mail server that takes
the whole message and drops the connection before its "250 OK" leaves the call ``uncertain``: the
customer may well have it. The model is told so; but a model that asks for the email again (a real
model need not follow the note) had it sent at once, and the customer got it twice. Whether another
email goes out after one that may have gone is decided in code, with the call's intent: a person
approves it first (DESIGN.md, invariants 5, 9 and 11).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest

from agents.llm import ModelResponse, ToolCallRequest, Usage
from agents.models import CallStatus, ToolCall
from agents.runner import advance
from approvals.models import ApprovalRequest
from tests.agents.conftest import retry_time_comes
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]

EMAIL = {"subject": "Your refund", "body": "We refunded order A-1002; it shows on your card in 5 days."}


class DropsAfterData:
    """An SMTP server on loopback that takes each message whole, then hangs up before saying "250 OK"
    (a crash or a cut link at the worst moment): the sender cannot know the message was delivered."""

    def __init__(self) -> None:
        self.messages: list[bytes] = []
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(8)
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        with conn:
            conn.sendall(b"220 test ESMTP\r\n")
            for line in reader:
                verb = line[:4].upper()
                if verb in (b"EHLO", b"HELO"):
                    conn.sendall(b"250 test\r\n")
                elif verb == b"DATA":
                    conn.sendall(b"354 go ahead\r\n")
                    body = b""
                    for data in reader:
                        if data == b".\r\n":
                            break
                        body += data
                    self.messages.append(body)
                    return  # delivered; the "250 OK" never comes
                elif verb == b"QUIT":
                    conn.sendall(b"221 bye\r\n")
                    return
                else:
                    conn.sendall(b"250 OK\r\n")

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def smtp(settings) -> Iterator[DropsAfterData]:  # noqa: ANN001
    server = DropsAfterData()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", server.port, 5.0
    yield server
    server.close()


class AsksForTheEmailAgain:
    """Asks to email the customer; told the email may or may not have gone, asks for it again (as a
    model may); then answers."""

    name = "asks-for-the-email-again"

    def __init__(self) -> None:
        self.asked = 0

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN201
        if self.asked < 2:
            self.asked += 1
            call = ToolCallRequest(f"e{self.asked}", "notify_customer_by_email", json.dumps(EMAIL))
            return ModelResponse(text="", tool_calls=[call], usage=Usage(10, 5), finish_reason="tool_calls")
        return ModelResponse(text="I have emailed you the details.", usage=Usage(10, 5))


def test_an_email_that_may_have_gone_out_is_not_sent_again_without_a_person(smtp):  # noqa: ANN001
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Refund", body="Email me the details")
    model = AsksForTheEmailAgain()

    for _ in range(4):
        advance(ticket.pk, model=model)
        retry_time_comes(ticket.pk)

    calls = list(ToolCall.objects.filter(ticket=ticket, name="notify_customer_by_email").order_by("pk"))
    assert calls and calls[0].status == CallStatus.UNCERTAIN, [(c.pk, c.status, c.error) for c in calls]
    assert len(smtp.messages) == 1, (
        f"the customer's mail server received the email {len(smtp.messages)} times: after the first send was left "
        f"uncertain, the model asked again and it was sent at once; calls: {[(c.status, c.error) for c in calls]}"
    )
    # The second one waits for a person, who sees why on the approval request.
    assert [c.status for c in calls[1:]] == [CallStatus.AWAITING_APPROVAL]
    request = ApprovalRequest.objects.get(tool_call=calls[1])
    assert "may have gone out" in request.reason


class AsksForTwoEmailsInOneStep:
    """Asks for two emails in one step (the second recorded before the first was left uncertain); then
    answers."""

    name = "asks-for-two-emails"

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN201
        if any(m["role"] == "tool" for m in messages):
            return ModelResponse(text="I have emailed you the details.", usage=Usage(10, 5))
        calls = [
            ToolCallRequest("e1", "notify_customer_by_email", json.dumps(EMAIL)),
            ToolCallRequest("e2", "notify_customer_by_email", json.dumps({**EMAIL, "subject": "Your refund (copy)"})),
        ]
        return ModelResponse(text="", tool_calls=calls, usage=Usage(10, 5), finish_reason="tool_calls")


def test_the_next_email_of_the_same_step_waits_for_a_person_and_is_sent_once_approved(smtp):  # noqa: ANN001
    from approvals import services as approval_services
    from tests.approvals.conftest import make_staff

    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Refund", body="Email me the details")
    model = AsksForTwoEmailsInOneStep()
    for _ in range(3):
        advance(ticket.pk, model=model)
        retry_time_comes(ticket.pk)

    first, second = ToolCall.objects.filter(ticket=ticket, name="notify_customer_by_email").order_by("pk")
    assert first.status == CallStatus.UNCERTAIN
    assert len(smtp.messages) == 1, f"sent {len(smtp.messages)} times; the second call is {second.status}"
    assert second.status == CallStatus.AWAITING_APPROVAL
    request = ApprovalRequest.objects.get(tool_call=second)
    assert "may have gone out" in request.reason

    # A person checked: it is sent, once.
    approval_services.approval_decide(approval_id=request.pk, user=make_staff("checker", can_decide=True), approve=True)
    for _ in range(3):
        advance(ticket.pk, model=model)
        retry_time_comes(ticket.pk)
    assert len(smtp.messages) == 2 and b"(copy)" in smtp.messages[1]


class RefusesTheRecipient(DropsAfterData):
    """An SMTP server that answers "550 no such user" to the recipient: the message is never taken."""

    def _serve(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        with conn:
            conn.sendall(b"220 test ESMTP\r\n")
            for line in reader:
                verb = line[:4].upper()
                if verb == b"RCPT":
                    conn.sendall(b"550 5.1.1 no such user\r\n")
                elif verb == b"DATA":
                    conn.sendall(b"503 5.5.1 no valid recipients\r\n")
                elif verb == b"QUIT":
                    conn.sendall(b"221 bye\r\n")
                    return
                else:
                    conn.sendall(b"250 OK\r\n")


class EmailsOnceThenReplies:
    name = "emails-once"

    def __init__(self, email: dict) -> None:
        self.email = email

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN201
        if any(m["role"] == "tool" for m in messages):
            return ModelResponse(text="I could not send the email.", usage=Usage(10, 5))
        call = ToolCallRequest("e1", "notify_customer_by_email", json.dumps(self.email))
        return ModelResponse(text="", tool_calls=[call], usage=Usage(10, 5), finish_reason="tool_calls")


@pytest.mark.parametrize("case", ["recipient-refused", "line-break-in-subject"])
def test_an_email_that_certainly_was_not_sent_is_failed_not_uncertain(case, settings):  # noqa: ANN001
    """Refused by the mail server before it took the message, or never built (a header cannot hold a
    line break): nothing went out, so the model, staff and the customer are told it was not sent, and the
    next email is not held for a person as one that may have gone."""
    server = RefusesTheRecipient() if case == "recipient-refused" else DropsAfterData()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", server.port, 5.0
    email = EMAIL if case == "recipient-refused" else {**EMAIL, "subject": "Your refund\nBcc: someone@example.test"}
    try:
        ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Refund", body="Email me")
        for _ in range(3):
            advance(ticket.pk, model=EmailsOnceThenReplies(email))
            retry_time_comes(ticket.pk)
    finally:
        server.close()

    call = ToolCall.objects.get(ticket=ticket, name="notify_customer_by_email")
    assert smtp_messages(server) == 0
    assert call.status == CallStatus.FAILED, (
        f"an email that was certainly not sent ({case}) was recorded {call.status}: {call.error!r}; the customer "
        "is told it may have gone out, and every later email waits for a person"
    )
    assert "not sent" in call.error


def smtp_messages(server: DropsAfterData) -> int:
    return len(server.messages)


def test_the_customer_reads_that_the_email_was_not_sent_in_plain_words(settings):  # noqa: ANN001
    """The offline model reads the refusal out in words for customers, not the mail server's reply."""
    from tests.agents.test_money_path import public_words

    server = RefusesTheRecipient()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", server.port, 5.0
    try:
        ticket, _ = ticket_services.ticket_open(
            customer=make_customer(), subject="Summary", body="Please email me a summary of this."
        )
        advance(ticket.pk)
    finally:
        server.close()

    said = " ".join(public_words(ticket))
    assert ToolCall.objects.get(ticket=ticket, name="notify_customer_by_email").status == CallStatus.FAILED
    assert "nothing was sent" in said and "SMTP" not in said and "550" not in said, said
