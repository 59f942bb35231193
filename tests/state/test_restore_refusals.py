"""Restore refuses a bundle that is cut, forged or damaged, with the reasons and nothing written; export
reads every part from one snapshot."""

from __future__ import annotations

import json
import threading
import time

import pytest
from django.core.management.base import CommandError
from django.db import connection

from agents.models import AgentRun, ModelStep, Refund, TicketLease, ToolCall
from approvals.models import ApprovalRequest
from state import bundle
from state import export as state_export_module
from tests.state.conftest import export, paused_ticket, rewrite_part, verify, write_manifest
from tests.state.test_bundle import ask, customer_with_paid_order, empty_the_ledger, ledger_counts, restore
from tickets import services as ticket_services
from tickets.models import Message, Ticket, TicketEvent

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


# A forged bundle whose digests match (rewrite_part): each row is wrong in a way only restore can see.
MALFORMED = {
    "an amount that is not a number": ("tickets.Order", lambda r: {**r, "total_cents": "lots"}),
    "an order number longer than its column": ("tickets.Order", lambda r: {**r, "number": "N" * 40}),
    "an amount beyond any integer column": ("tickets.Order", lambda r: {**r, "total_cents": 2**70}),
    "a date that does not exist": ("tickets.Message", lambda r: {**r, "created_at": "2026-13-45T00:00:00+00:00"}),
    "a row without its primary key": ("tickets.Message", lambda r: {k: v for k, v in r.items() if k != "id"}),
    "a status this release does not know": ("tickets.Ticket", lambda r: {**r, "status": "bogus"}),
    "a row that is not an object": ("tickets.Message", lambda r: 7),
    "a call without its name": ("agents.ToolCall", lambda r: {k: v for k, v in r.items() if k != "name"}),
    "a call whose arguments are a list": ("agents.ToolCall", lambda r: {**r, "arguments": ["x"]}),
    "a call whose arguments are a text": ("agents.ToolCall", lambda r: {**r, "arguments": "refund it"}),
    "an approval whose arguments are a list": ("approvals.ApprovalRequest", lambda r: {**r, "arguments": [1]}),
    # Values of another JSON type than export writes, that a column would have taken after a silent
    # conversion (an amount cut to whole cents, true read as 1), or not at all (restore's insert failed).
    "an amount with a fraction": ("tickets.Order", lambda r: {**r, "total_cents": r["total_cents"] + 0.5}),
    "an amount that is true": ("tickets.Order", lambda r: {**r, "total_cents": True}),
    "an amount written as a text": ("tickets.Order", lambda r: {**r, "total_cents": str(r["total_cents"])}),
    "an id that is true": ("tickets.Message", lambda r: {**r, "id": True}),
    "a flag that is a number": ("tickets.Customer", lambda r: {**r, "requires_refund_approval": 1}),
    "a message body that is a list": ("tickets.Message", lambda r: {**r, "body": [r["body"]]}),
    "a message body with a NUL character": ("tickets.Message", lambda r: {**r, "body": "a\x00b"}),
    "arguments with a NUL character": ("agents.ToolCall", lambda r: {**r, "arguments": {"order_number": "\x00"}}),
    "an id past any key": ("tickets.Message", lambda r: {**r, "id": 2**63}),
    "an id below one": ("tickets.Message", lambda r: {**r, "id": -1}),
}


@pytest.mark.parametrize("what", list(MALFORMED))
def test_restore_refuses_a_malformed_row_with_a_clear_error_and_writes_nothing(tmp_path, what):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    label, change = MALFORMED[what]
    rewrite_part(path, label, lambda rows: [change(rows[0]), *rows[1:]])
    counts = ledger_counts()

    # A CommandError ("Nothing was restored: ..."), not a traceback (ValidationError, DataError,
    # KeyError, ValueError, OverflowError) or, for an unknown status, a restored ticket no page can show.
    with pytest.raises(CommandError, match="Nothing was restored|cannot be trusted"):
        restore(path)
    assert ledger_counts() == counts


@pytest.mark.parametrize("what", list(MALFORMED))
def test_verify_reports_a_malformed_row_instead_of_a_traceback(tmp_path, what):
    """What broke: verify read the rows in its ledger checks before checking them, and ended in a
    traceback (KeyError, AttributeError) on a row that is not an object, a row without a column, or a
    call's arguments that are a list or a text."""
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    label, change = MALFORMED[what]
    rewrite_part(path, label, lambda rows: [change(rows[0]), *rows[1:]])

    status, out = verify(path)  # a traceback fails the test here

    assert status == 1 and "FAILED every row is a row of its table" in out, out


def test_restore_refuses_a_bundle_that_left_out_the_refunds_part(tmp_path, sandbox):
    customer, order = customer_with_paid_order(sandbox, "S-5005", 4999)
    ticket = ask(customer, "Please refund $30 on order S-5005")
    assert Refund.objects.filter(order=order).count() == 1
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    manifest = json.loads((path / bundle.MANIFEST).read_text())
    entry = next(p for p in manifest["parts"] if p["label"] == "agents.Refund")
    manifest["parts"].remove(entry)
    (path / entry["file"]).unlink()
    write_manifest(path, manifest)

    # Every part this release writes is in every bundle it writes: one that is not there is a bundle
    # that lost rows, and restoring it would put back the order without the $30 already paid on it.
    with pytest.raises(CommandError, match="agents.Refund"):
        restore(path)
    assert not Ticket.objects.exists()


def test_restore_refuses_a_row_that_points_at_a_ticket_outside_the_bundle(tmp_path):
    victim, _ = paused_ticket(number="S-7007")
    ticket, _ = paused_ticket(number="S-8008")
    path = export(tmp_path, ticket, include_personal_data=True)
    for model in (ApprovalRequest, Refund, ToolCall, ModelStep, AgentRun, TicketEvent, Message, TicketLease):
        model.objects.filter(ticket=ticket).delete()
    Ticket.objects.filter(pk=ticket.pk).delete()

    def inject(rows):  # noqa: ANN001, ANN202
        return [*rows, {**rows[0], "id": 900000, "ticket_id": victim.pk, "body": "INJECTED", "client_msg_id": "inj"}]

    rewrite_part(path, "tickets.Message", inject)
    assert verify(path)[0] == 1  # verify sees the reference that does not resolve inside the bundle

    with pytest.raises(CommandError, match="Nothing was restored"):
        restore(path, on_conflict="skip")
    assert not Message.objects.filter(ticket=victim, body="INJECTED").exists()
    assert not Ticket.objects.filter(pk=ticket.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_an_export_taken_while_the_ticket_moves_on_is_one_consistent_snapshot(tmp_path, monkeypatch):
    ticket, _ = paused_ticket()
    dump = state_export_module.dump

    def dump_then_the_ticket_moves_on(queryset):  # noqa: ANN001, ANN202
        rows = dump(queryset)
        if queryset.model is Ticket:
            # Another process (a worker, a staff reply) appends an event after the tickets were read.
            def append() -> None:
                ticket_services.event_append(ticket=ticket.pk, kind="note", actor_kind="system")
                connection.close()

            thread = threading.Thread(target=append)
            thread.start()
            thread.join()
        return rows

    monkeypatch.setattr(state_export_module, "dump", dump_then_the_ticket_moves_on)
    path = export(tmp_path, ticket, include_personal_data=True)

    status, report = verify(path)
    assert status == 0, report  # the bundle's ticket says last_event_seq N but carries N+1 events


def test_restore_refuses_a_customer_login_that_is_a_member_of_staff_here(tmp_path):
    ticket, _ = paused_ticket()
    username = ticket.customer.user.username
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user(username=username, password="x", is_staff=True)  # same name, not them

    with pytest.raises(CommandError, match="a customer in the bundle and staff in this database"):
        restore(path)
    assert ledger_counts()["tickets.Ticket"] == 0


@pytest.mark.django_db(transaction=True)
def test_an_export_that_works_on_its_rows_longer_than_the_idle_in_transaction_limit_completes(tmp_path, monkeypatch):
    ticket, _ = paused_ticket()
    with connection.cursor() as cursor:  # a limit far below the deployment's, for the test's sake
        cursor.execute("SET idle_in_transaction_session_timeout = 500")
    pseudonymise = state_export_module.pseudonymise

    def slow_pseudonyms(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        time.sleep(1.5)  # a large bundle's customers, worked on between the snapshot's reads
        return pseudonymise(*args, **kwargs)

    monkeypatch.setattr(state_export_module, "pseudonymise", slow_pseudonyms)
    path = export(tmp_path, ticket)

    assert verify(path)[0] == 0
