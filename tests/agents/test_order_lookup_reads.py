"""The order look-up tool reads the order, then what was refunded on it and its lines together."""

from __future__ import annotations

import contextlib

import psycopg
import pytest

from agents.models import CallStatus, Refund, RefundStatus, ToolCall
from agents.runner import advance
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import OrderLine

pytestmark = pytest.mark.django_db(transaction=True)


class RoundTrips:
    """Round trips to the server during a tool's run: a statement sent alone, or a pipeline of several."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.active = False
        execute, pipeline = psycopg.Cursor.execute, psycopg.Connection.pipeline

        def counting_execute(cursor, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            if self.active and cursor.connection._pipeline is None:
                self.count += 1
            return execute(cursor, *args, **kwargs)

        @contextlib.contextmanager
        def counting_pipeline(conn):  # noqa: ANN001, ANN202
            if self.active:
                self.count += 1
            with pipeline(conn) as p:
                yield p

        monkeypatch.setattr(psycopg.Cursor, "execute", counting_execute)
        monkeypatch.setattr(psycopg.Connection, "pipeline", counting_pipeline)


def test_an_order_look_up_says_what_was_refunded_and_its_lines_in_two_round_trips(monkeypatch):
    from agents import tools

    customer = make_customer()
    order = make_order(customer, number="A-7301", total_cents=9000)
    OrderLine.objects.create(order=order, sku="LID", description="Lid", quantity=2, unit_price_cents=500)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Lid", body="Where is my order A-7301?")
    call_ticket = ticket.__class__.objects.select_related("customer").get(pk=ticket.pk)
    advance(ticket.pk)  # the offline model looks the order up
    call = ToolCall.objects.get(ticket=ticket, name="lookup_order")
    assert call.status == CallStatus.SUCCEEDED and call.result["refunded_cents"] == 0
    Refund.objects.create(
        ticket=ticket, tool_call=call, order=order, amount_cents=1500, currency="usd",
        idempotency_key="k-lookup-1", status=RefundStatus.SUCCEEDED,
    )  # fmt: skip
    trips = RoundTrips(monkeypatch)
    original = tools.REGISTRY["lookup_order"].handler

    trips.active = True
    result = original(tools.ToolContext(ticket=call_ticket, call=call), {"order_number": "A-7301"})
    trips.active = False

    assert (result["refunded_cents"], result["refundable_cents"], result["refundable"]) == (1500, 7500, "$75.00")
    assert sorted((line["description"], line["quantity"]) for line in result["lines"]) == [("Lid", 2), ("Thing", 1)]
    # The order by its number, then what was refunded on it and its lines, together.
    assert trips.count == 2, trips.count
