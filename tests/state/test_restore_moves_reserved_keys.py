"""Keys a process reserved before a restore do not name restored rows after it.

Model steps and tool calls take their keys from a block each process reserves ahead
(``support.rows``). A restore moves the tables' sequences past the restored ids; a block
reserved before that (on a deployment whose sequences started again) may hold those very ids,
and the next step written from it would collide with a restored step.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from agents.models import AgentRun, ModelStep, RunStatus
from agents.runner import advance
from support.rows import forget_key_blocks
from tests.agents.conftest import retry_time_comes
from tests.conftest import make_customer, make_order
from tests.state.conftest import export, paused_ticket
from tests.state.test_bundle import empty_the_ledger, restore
from tests.state.test_state_contract import manage
from tests.workers import test_database_url as database_url
from tickets import services as ticket_services
from tickets.models import Message, Ticket

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


def _answered(name: str, number: str) -> Ticket:
    customer = make_customer(name)
    make_order(customer, number=number)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Where", body=f"Where is my order {number}?")
    advance(ticket.pk)
    return ticket


@pytest.mark.django_db(transaction=True, reset_sequences=True)
@pytest.mark.timeout(180)
def test_a_worker_left_running_through_a_restore_goes_on_answering_its_ticket(tmp_path, cluster):  # noqa: ANN001
    """What broke: a worker of the deployment restored into (here, this test process) kept the key
    block it reserved before the restore, which ``manage.py restore_state``, a process of its own,
    cannot drop: each retry of its next step collided with a restored row, and its ticket was parked.
    Now the first collision drops the worker's blocks and the step is written again past them."""
    forget_key_blocks()
    _answered("first", "LV-1001")
    moved = [_answered(f"moved{n}", f"LV-10{n}0") for n in range(2, 5)]
    restored_steps = set(ModelStep.objects.filter(ticket__in=moved).values_list("pk", flat=True))
    path = tmp_path / "moved.tar"
    call_command("export_state", *[a for t in moved for a in ("--ticket", str(t.pk))], include_personal_data=True,
                 output=str(path), stdout=io.StringIO())  # fmt: skip
    empty_the_ledger()
    own = _answered("own", "LV-2001")  # this worker's block now holds the moved tickets' keys

    restored = manage(cluster, database_url(), "restore_state", str(path))
    assert restored.returncode == 0, restored.stdout + restored.stderr

    ticket_services.message_post(ticket=own.pk, author_kind="customer", body="And where is order LV-2001 now?")
    for _ in range(4):
        advance(own.pk)
        retry_time_comes(own.pk)
    run = AgentRun.objects.filter(ticket=own).latest("id")
    assert run.status == RunStatus.COMPLETED, (run.status, run.failures, run.last_error)
    assert Message.objects.filter(ticket=own, author_kind="agent").count() == 2
    assert set(ModelStep.objects.filter(ticket__in=moved).values_list("pk", flat=True)) == restored_steps
