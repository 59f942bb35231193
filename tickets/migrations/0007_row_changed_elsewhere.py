"""A function the statement that carries a held write that must change one row calls when it changed
none (support.rows, ``update(..., unless_changed=...)``): it fails the whole statement, even when that
statement is the whole transaction and commits on its own."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION tickets_row_changed_elsewhere(refusal text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%', refusal USING ERRCODE = 'LF002';
END
$$
"""

DROP = "DROP FUNCTION IF EXISTS tickets_row_changed_elsewhere(text)"


class Migration(migrations.Migration):
    dependencies = [("tickets", "0006_assignee_can_work_tickets")]

    operations = [migrations.RunSQL(CREATE, DROP)]
