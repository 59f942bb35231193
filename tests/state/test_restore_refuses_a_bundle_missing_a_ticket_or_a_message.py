"""A bundle that lost a ticket it was exported with, or one customer message, is reported by
``verify_state`` and refused by ``restore_state``.

Both bundles are consistent with themselves (each edited part's digest written again and the
manifest signed with the key, as by a forger who holds it or a release with a bug: the checks behind
the signature are what must refuse it). Before, verify said "Result: OK" to each, and restore wrote
the rest: a ticket exported with another came back alone, with no word of the one left behind; a
ticket whose customer message was cut came back with its timeline's message event naming a message
that was nowhere (the words lost, and never answered).
"""

from __future__ import annotations

import pytest
from django.core.management.base import CommandError

from tests.state.conftest import export, paused_ticket, rewrite_part, verify
from tests.state.test_bundle import empty_the_ledger, restore
from tickets.models import Message, Ticket

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

# The parts whose rows belong to one ticket by its ticket_id.
TICKET_PARTS = (
    "tickets.Message",
    "tickets.TicketRating",
    "tickets.TicketEvent",
    "agents.TicketLease",
    "agents.AgentRun",
    "agents.ModelStep",
    "agents.ToolCall",
    "agents.Refund",
    "approvals.ApprovalRequest",
)


def test_a_bundle_with_an_exported_ticket_cut_out_is_reported_and_not_restored(tmp_path):
    first, _ = paused_ticket("ann", number="S-1001")
    second, _ = paused_ticket("bea", number="S-1002")
    path = export(tmp_path, first, second, include_personal_data=True)
    assert verify(path)[0] == 0
    rewrite_part(path, "tickets.Ticket", lambda rows: [r for r in rows if r["id"] != second.pk])
    for label in TICKET_PARTS:
        rewrite_part(path, label, lambda rows: [r for r in rows if r["ticket_id"] != second.pk])

    status, out = verify(path)
    assert status == 1 and f"ticket #{second.pk} was exported and is not in the bundle" in out, out
    empty_the_ledger(restart_keys=False)
    with pytest.raises(CommandError, match=f"ticket #{second.pk} was exported"):
        restore(path)
    assert not Ticket.objects.exists()


def test_a_bundle_with_a_customer_message_cut_out_is_reported_and_not_restored(tmp_path):
    ticket, _ = paused_ticket("ann", number="S-1001")
    path = export(tmp_path, ticket, include_personal_data=True)
    message = Message.objects.filter(ticket=ticket).order_by("pk").first()
    rewrite_part(path, "tickets.Message", lambda rows: [r for r in rows if r["id"] != message.pk])

    status, out = verify(path)
    assert status == 1 and f"names tickets.Message {message.pk}, which is not in the bundle" in out, out
    empty_the_ledger(restart_keys=False)
    with pytest.raises(CommandError, match=f"names tickets.Message {message.pk},"):
        restore(path)
    assert not Ticket.objects.exists()


def test_the_whole_bundle_of_two_tickets_still_restores_with_every_message(tmp_path):
    first, _ = paused_ticket("ann", number="S-1001")
    second, _ = paused_ticket("bea", number="S-1002")
    messages = Message.objects.count()
    path = export(tmp_path, first, second, include_personal_data=True)
    empty_the_ledger(restart_keys=False)

    restore(path)

    assert sorted(Ticket.objects.values_list("pk", flat=True)) == sorted([first.pk, second.pk])
    assert Message.objects.count() == messages
