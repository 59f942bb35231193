"""A restore into a live deployment never moves a table's keys back to ones already handed out.

Restore moves each table's sequence past the restored ids. It set it to the highest id it could see: a
row another process was writing meanwhile (its key taken, its transaction not committed yet) was not
among them, so the sequence went back below that key, and the next row written after the restore (a
customer's message, here) was given the same key and refused as a duplicate.
"""

from __future__ import annotations

import psycopg
import pytest

from tests import workers
from tests.conftest import make_customer, make_order
from tests.state.conftest import export, paused_ticket
from tests.state.test_bundle import empty_the_ledger, restore
from tickets import services as ticket_services
from tickets.models import Message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_a_message_written_after_a_restore_takes_a_key_no_other_writer_holds(tmp_path):
    empty_the_ledger()
    moved, _ = paused_ticket(number="S-1001")
    path = export(tmp_path, moved, include_personal_data=True)
    empty_the_ledger(restart_keys=False)  # this deployment goes on numbering past the bundle's keys
    customer = make_customer("here")
    make_order(customer, number="H-2002")
    here, _ = ticket_services.ticket_open(customer=customer, subject="Where", body="Where is H-2002?")
    columns = [f.column for f in Message._meta.concrete_fields if not f.primary_key and f.column != "client_msg_id"]
    listed = ", ".join(columns)

    # Another process writes a message of its own ticket: its key is taken, its transaction still open.
    with psycopg.connect(workers.test_database_url()) as writer:
        (held,) = writer.execute(
            f"INSERT INTO tickets_message ({listed}) SELECT {listed} FROM tickets_message WHERE ticket_id = %s "
            "RETURNING id",
            [here.pk],
        ).fetchone()
        restore(path)
        writer.commit()

    ticket_services.message_post(ticket=here.pk, author_kind="customer", body="Any news?")  # IntegrityError before

    assert Message.objects.filter(ticket=here, body="Any news?").get().pk > held
