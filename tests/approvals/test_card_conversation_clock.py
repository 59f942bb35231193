"""The conversation on an approval card is in the order it happened, whatever the hosts' clocks say.

The card is what a person reads before approving a refund. Its messages and the agent's calls were
sorted by the times the hosts that wrote them read on their own clocks: on many hosts, with one web
server's clock ten minutes behind, a customer's "don't refund it after all", written there after
their request, was shown above the request, and the card read as if they still wanted the money.
The card now follows the ticket's timeline, as the chat and the staff ticket page do.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.agents.test_backoff_clock import on_a_host_whose_clock_is_off
from tests.approvals.test_dashboard_cards import dashboard, part, paused
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

CHANGED_MIND = "Actually, please don't refund it, I will keep it"


@pytest.mark.parametrize("later", [timedelta(minutes=-10), timedelta(minutes=10)], ids=["behind", "ahead"])
def test_a_message_written_on_a_web_host_whose_clock_is_off_is_shown_where_it_was_written(
    sandbox, client, approver, monkeypatch, later
):  # noqa: ANN001
    ticket, approval = paused(sandbox, "E-5901")  # web host and worker on the database's time
    with monkeypatch.context() as host:
        on_a_host_whose_clock_is_off(host, later)
        # A column's default is the clock function itself, taken when the model was defined.
        host.setattr(Message._meta.get_field("created_at"), "_get_default", timezone.now)
        ticket_services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body=CHANGED_MIND)
    ticket_services.message_post(
        ticket=ticket, author_kind=AuthorKind.STAFF, author_user=approver, body="Checking this one", is_public=False
    )
    client.force_login(approver)

    conversation = part(dashboard(client), approval, r'<details class="conversation">(.*?)</details>')

    asked = conversation.index("Customer: Please refund my order E-5901")
    refund = conversation.index("Agent: asked to refund $649.00 of order E-5901")
    changed_mind = conversation.index(f"Customer: {CHANGED_MIND}")
    note = conversation.index("Staff (approver) (internal note): Checking this one")
    assert asked < refund < changed_mind < note, conversation
