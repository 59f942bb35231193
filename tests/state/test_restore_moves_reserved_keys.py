"""Keys a process reserved before a restore do not name restored rows after it.

Model steps and tool calls take their keys from a block each process reserves ahead
(``support.rows``). A restore moves the tables' sequences past the restored ids; a block
reserved before that (on a deployment whose sequences started again) may hold those very ids,
and the next step written from it would collide with a restored step.
"""

from __future__ import annotations

import pytest

from agents.models import ModelStep, RunStatus
from agents.runner import advance
from tests.state.conftest import export, paused_ticket
from tests.state.test_bundle import empty_the_ledger, restore
from tickets import services as ticket_services
from tickets.models import Ticket

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_step_written_after_a_restore_takes_a_key_past_the_restored_ones(tmp_path):
    empty_the_ledger()  # the keys start again at 1, so the bundle's steps have the lowest ones
    first, _ = paused_ticket("wilhelmina", number="S-1001")
    second, _ = paused_ticket("ottilie", number="S-1002")
    restored_steps = set(ModelStep.objects.values_list("pk", flat=True))
    path = export(tmp_path, first, second)
    empty_the_ledger()
    # This process writes the steps of one ticket on the emptied database, then the database loses
    # them: the rest of its key block holds the keys the bundle's second ticket had.
    paused_ticket("augusta", number="S-1003")
    empty_the_ledger(restart_keys=False)

    restore(path)

    customer = Ticket.objects.get(pk=second.pk).customer
    again, _ = ticket_services.ticket_open(customer=customer, subject="Where is my order?", body="Where is S-1002?")
    advance(again.pk)
    again_steps = set(ModelStep.objects.filter(run__ticket=again).values_list("pk", flat=True))
    assert again_steps, "the new ticket's steps were not written"
    assert not again_steps & restored_steps
    assert again.agent_runs.get().status != RunStatus.FAILED
