"""Signals the ledger sends so that other apps can react without ``tickets`` importing them."""

from __future__ import annotations

from django.dispatch import Signal

# Sent after commit when a ticket may have new work for the agent
# (a customer message arrived, a decision was recorded). Argument: ticket_id.
ticket_needs_agent = Signal()

# Sent after commit when a person (or the system) took a ticket from the agent: it went to a person,
# resolved or closed. Argument: ticket_id.
ticket_taken_from_agent = Signal()

# Sent after commit when a person on the team wrote on a ticket (a reply to the customer or an
# internal note): views that quote its conversation read it again. Argument: ticket_id.
ticket_staff_wrote = Signal()

# Sent after commit when a transaction appended timeline events to a ticket (once per
# transaction and ticket, a doorbell: watchers read what is new). Argument: ticket_id.
ticket_event_appended = Signal()

# Sent inside the transaction that gives a ticket back to the agent (from a person, resolved or
# closed to a status the agent works in): receivers write in that transaction. Argument: ticket_id.
ticket_given_back = Signal()
