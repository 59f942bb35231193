from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_save


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
        # Open sockets end with the sign-in they were opened with (support.websocket.SignedInConsumer).
        user_logged_out.connect(_signed_out, dispatch_uid="tickets.signed_out")
        post_save.connect(_account_changed, sender=settings.AUTH_USER_MODEL, dispatch_uid="tickets.account_changed")


def _publish_event(sender: object, ticket_id: int, **kwargs: object) -> None:
    from tickets import realtime

    realtime.publish_event(ticket_id)


def _signed_out(sender: object, request: Any, user: Any, **kwargs: object) -> None:
    """Sent before the session is flushed: its sockets are told by its key."""
    from support.websocket import session_group
    from tickets import realtime

    key = getattr(getattr(request, "session", None), "session_key", None)
    if key:
        realtime.publish(session_group(key), {"type": "signin.ended"})


def _account_changed(sender: object, instance: Any, created: bool, update_fields: Any = None, **kwargs: object) -> None:
    """A password set, an account deactivated: its sockets check their sign-in again (after commit)."""
    from support.websocket import account_group
    from tickets import realtime

    if created or (update_fields is not None and set(update_fields) <= {"last_login"}):
        return
    group = account_group(instance.pk)
    transaction.on_commit(lambda: realtime.publish(group, {"type": "signin.changed"}))
