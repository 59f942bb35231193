"""A person the ledger names (on the timeline, as a message's author, as a ticket's assignee, as who
saved a profile version) is deactivated, not deleted, from the admin: the foreign keys are SET_NULL, so
a deletion emptied the "who" of the audit trail instead of being refused. A login nothing names can
still be deleted.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tests.conftest import make_customer
from tickets import services
from tickets.models import TicketEvent

pytestmark = pytest.mark.django_db


def test_a_staff_member_on_the_timeline_is_not_deleted_from_their_page_nor_from_the_list(admin_client):
    """Deleting a person's login emptied the "who" of every timeline event and message of theirs (the
    foreign keys are SET_NULL): the audit trail no longer said who took the ticket over or replied."""
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Hi", body="I want a person")
    colleague = get_user_model().objects.create_user(username="colleague", password="x", is_staff=True)
    services.ticket_take_over(ticket=ticket, user=colleague)
    named = TicketEvent.objects.filter(ticket=ticket, actor_user=colleague).count()
    assert named > 0

    page = admin_client.post(f"/admin/auth/user/{colleague.pk}/delete/", {"post": "yes"})
    listed = admin_client.post(
        "/admin/auth/user/", {"action": "delete_selected", "_selected_action": [colleague.pk], "post": "yes"}
    )
    asked = admin_client.get(f"/admin/auth/user/{colleague.pk}/delete/")

    assert get_user_model().objects.filter(pk=colleague.pk).exists()
    assert TicketEvent.objects.filter(ticket=ticket, actor_user=colleague).count() == named
    assert page.status_code == 403 and listed.status_code == 403
    assert "deactivate" in asked.content.decode()  # what to do instead


def test_a_login_nobody_reads_on_the_ledger_can_still_be_deleted(admin_client):
    mistake = get_user_model().objects.create_user(username="typo", password="x", is_staff=True)

    admin_client.post(f"/admin/auth/user/{mistake.pk}/delete/", {"post": "yes"})

    assert not get_user_model().objects.filter(pk=mistake.pk).exists()
