from __future__ import annotations

from django.apps import AppConfig


class TicketsConfig(AppConfig):
    name = "tickets"
    verbose_name = "Tickets"

    def ready(self) -> None:
        # Watchers of a ticket (the customer's chat) learn of each committed
        # timeline event through its Channels group.
        from tickets.presenters import register_kinds
        from tickets.signals import ticket_event_appended

        register_kinds()

        ticket_event_appended.connect(_publish_event, dispatch_uid="tickets.publish_event")


def _publish_event(sender: object, ticket_id: int, **kwargs: object) -> None:
    from tickets import realtime

    realtime.publish_event(ticket_id)
