"""A customer who writes while the run waits for staff is told their message waits for the decision
("[automatic notice] ... still under review"); the message itself is the next run's to answer. The
step the decision resumes read the notice without the message it answers, and read it after the
approved refund's result: the last words it had said the request was still under review. The
notice now comes into a request with its message, as the ledger holds them."""

from __future__ import annotations

import pytest

from agents.conversation import request_of
from agents.models import ModelStep
from agents.runner import advance
from approvals import services
from approvals.models import ApprovalRequest
from tests.approvals.test_approvals import refund_ticket
from tickets import services as ticket_services
from tickets.models import AuthorKind

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

QUESTION = "Also, do you ship to Canada?"


def test_the_step_a_decision_resumes_reads_no_notice_about_a_message_it_does_not_hold(sandbox, approver):
    ticket, _ = refund_ticket(sandbox)
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    ticket_services.message_post(ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, body=QUESTION)
    advance(ticket.pk)  # the customer is told the message waits for the decision

    services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    advance(ticket.pk)

    requests = [request_of(step) for step in ModelStep.objects.filter(run__ticket=ticket).order_by("id")]
    resumed = next(r for r in requests if any('"status": "succeeded"' in str(m.get("content")) for m in r))
    said = [str(m.get("content") or "") for m in resumed]
    notices = [text for text in said if "we got your message" in text]
    assert not notices or QUESTION in said, said
    # The message and its notice are read by the next run, in ledger order, the message first.
    last = requests[-1]
    texts = [str(m.get("content") or "") for m in last]
    assert QUESTION in texts
    notice = next(i for i, text in enumerate(texts) if "we got your message" in text)
    assert texts.index(QUESTION) < notice
