"""bench.waiting: tickets paused by real worker processes over HTTP, and their bulk copies."""

from __future__ import annotations

import pytest

from agents.calls import idempotency_key
from agents.conversation import request_of
from agents.models import AgentRun, CallStatus, ModelStep, RunStatus, ToolCall
from approvals.models import ApprovalRequest, ApprovalStatus
from approvals.services import approval_decide
from bench import waiting
from bench.overhead import BenchError
from tests.approvals.test_approvals import replies
from tests.workers import free_port, wait_for_http, wait_until
from tickets.demo import STAFF_USERNAME, seed_demo
from tickets.models import Message, Order, Ticket, TicketEvent, TicketStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(300)]


@pytest.fixture(autouse=True)
def _fast_password_hashing() -> None:
    """Overrides the suite's fast test hasher: the web process checks the demo passwords with its own."""


@pytest.fixture
def site(sandbox, cluster) -> str:  # noqa: ANN001
    """The demo data, daphne and one worker on the test database; returns the site's base URL."""
    seed_demo()
    waiting.prepare()
    port = free_port()
    web = cluster.web(port, CUSTOMER_TICKET_RATE="1000/s")
    worker = cluster.worker()
    base_url = f"http://127.0.0.1:{port}"
    wait_for_http(f"{base_url}/accounts/login/", timeout=60, proc=web)
    wait_until(lambda: "ready." in worker.log(), timeout=60, what="the worker to start", cluster=cluster)
    return base_url


def ids_apart() -> None:
    """Each copied table's ids from a range of its own: in a fresh database a step and a call
    may share an id, and a reference rewritten against the wrong table would go unseen."""
    from django.db import connection

    with connection.cursor() as cursor:
        for n, (table, rewrites) in enumerate(waiting.CLONED.items(), start=1):
            if rewrites.get("id") == waiting.NEW:
                cursor.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)", [table, n * 100_000])


def pause_through_the_worker(site: str, count: int) -> tuple[list[int], set[str]]:
    """``count`` refunds asked over HTTP and paused by the worker; the tickets and the tables they wrote."""
    ids_apart()
    tables = waiting._user_tables()
    before = waiting._table_rows(tables)
    records = waiting.pause_real(site, count, in_flight=2)
    return [r["ticket_id"] for r in records], waiting.tables_written(before, waiting._table_rows(tables))


def test_a_pause_made_by_the_worker_is_copied_row_for_row_and_a_copy_resumes_on_approval(site, sandbox):
    real, written = pause_through_the_worker(site, 3)
    template, typical = waiting.template_of(real, sorted(written))
    copies = waiting.pause_bulk(template, 4, written)
    checked = waiting.verify_pauses(real, copies, template, sorted(written))

    assert typical == 3
    assert checked["paused"] == dict.fromkeys(checked["paused"], 7)
    # The worker's offline model looks the order up, then asks for the refund: two steps, two calls.
    assert checked["rows_per_ticket"]["agents_modelstep"] == {"real": 2, "template": 2, "bulk": 2}
    assert checked["rows_per_ticket"]["agents_toolcall"] == {"real": 2, "template": 2, "bulk": 2}
    assert checked["rows_per_ticket"]["tickets_ticketevent"]["bulk"] > 2
    assert len(set(copies) | set(real)) == 7
    for copy in copies:
        ticket = Ticket.objects.get(pk=copy)
        assert ticket.status == TicketStatus.PENDING_APPROVAL
        run = AgentRun.objects.get(ticket=ticket)
        assert run.status == RunStatus.WAITING_APPROVAL
        message = Message.objects.get(ticket=ticket)
        assert message.client_msg_id == f"open:{ticket.client_ref}"
        assert run.input_message_ids == [message.pk]
        first, second = ModelStep.objects.filter(ticket=ticket).order_by("index")
        assert (first.run_id, second.run_id) == (run.pk, run.pk)
        assert first.request_prefix_id is None and second.request_prefix_id == first.pk
        assert f"Ticket #{copy}:" in request_of(second)[0]["content"]
        lookup, refund = ToolCall.objects.filter(ticket=ticket).order_by("step__index")
        assert (lookup.name, lookup.step_id, lookup.status) == ("lookup_order", first.pk, CallStatus.SUCCEEDED)
        assert (refund.name, refund.step_id, refund.status) == ("issue_refund", second.pk, CallStatus.AWAITING_APPROVAL)
        for call, step in ((lookup, first), (refund, second)):
            expected = idempotency_key(ticket_id=copy, run_id=run.pk, step_index=step.index, call_index=call.index)
            position, random_part = call.idempotency_key.rsplit("-", 1)
            assert position == expected.rsplit("-", 1)[0] and len(random_part) == 8, call.idempotency_key
        approval = ApprovalRequest.objects.get(ticket=ticket)
        assert approval.tool_call_id == refund.pk and approval.status == ApprovalStatus.PENDING
        payloads = [e.payload for e in TicketEvent.objects.filter(ticket=ticket)]
        assert {p["call_id"] for p in payloads if "call_id" in p} == {lookup.pk, refund.pk}
        assert {p["run_id"] for p in payloads if "run_id" in p} == {run.pk}
        assert {p["approval_id"] for p in payloads if "approval_id" in p} == {approval.pk}
        assert {p["message_id"] for p in payloads if "message_id" in p} == {message.pk}

    # A copy is a pause the product takes up: approved, the worker pays it under the copy's own key.
    copy = copies[-1]
    order = Order.objects.get(number=waiting.REFUND_ORDER)
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    staff = Ticket.objects.get(pk=copy).customer.user.__class__.objects.get(username=STAFF_USERNAME)
    approval_decide(approval_id=ApprovalRequest.objects.get(ticket_id=copy).pk, user=staff, approve=True)
    wait_until(lambda: replies(Ticket.objects.get(pk=copy)), timeout=60, what="the approved copy's reply")
    refund = ToolCall.objects.get(ticket_id=copy, name="issue_refund")
    assert refund.status == CallStatus.SUCCEEDED
    paid = [r for r in sandbox.refunds() if r["payment_intent"] == order.payment_reference]
    assert [r["metadata"]["idempotency_key"] for r in paid] == [refund.idempotency_key]
    assert "I've refunded $649.00" in replies(Ticket.objects.get(pk=copy))[0]
    assert ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING).count() == 6


def test_the_copy_refuses_what_it_cannot_rewrite_and_the_check_finds_a_reference_to_another_ticket(site):
    real, written = pause_through_the_worker(site, 1)
    template = real[0]

    with pytest.raises(BenchError, match="does not know"):
        waiting.pause_bulk(template, 2, written | {"agents_refund"})
    event = TicketEvent.objects.filter(ticket_id=template, kind="agent_run_started").get()
    event.payload["order_id"] = Order.objects.get(number=waiting.REFUND_ORDER).pk
    event.save(update_fields=["payload"])
    with pytest.raises(BenchError, match=r"payload\.order_id holds row ids"):
        waiting.pause_bulk(template, 2, written)
    del event.payload["order_id"]
    event.save(update_fields=["payload"])

    copies = waiting.pause_bulk(template, 2, written)
    waiting.verify_pauses(real, copies, template, sorted(written))
    second = ModelStep.objects.get(ticket_id=copies[0], index=1)
    original = second.request_prefix_id
    second.request_prefix_id = ModelStep.objects.get(ticket_id=template, index=0).pk
    second.save(update_fields=["request_prefix_id"])
    with pytest.raises(BenchError, match="request_prefix_id of the bulk pauses point at another ticket's rows"):
        waiting.verify_pauses(real, copies, template, sorted(written))
    second.request_prefix_id = original
    second.save(update_fields=["request_prefix_id"])
    waiting.verify_pauses(real, copies, template, sorted(written))
