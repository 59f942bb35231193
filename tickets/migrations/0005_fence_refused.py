"""A function the statement that writes a fenced transaction's events calls when its fence does not
hold: it fails the whole statement (so nothing of it stays, even when that statement is the whole
transaction and commits on its own; see tickets.services.events_batched)."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION tickets_fence_refused() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the fence of this transaction does not hold (the lease was lost)'
        USING ERRCODE = 'LF001';
END
$$
"""

DROP = "DROP FUNCTION IF EXISTS tickets_fence_refused()"


class Migration(migrations.Migration):
    dependencies = [("tickets", "0004_customer_list_and_rating")]

    operations = [migrations.RunSQL(CREATE, DROP)]
