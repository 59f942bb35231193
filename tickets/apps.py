from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import m2m_changed, post_save, pre_save


class TicketsConfig(AppConfig):
    name = "tickets"
    verbose_name = "Tickets"

    def ready(self) -> None:
        # Watchers of a ticket (the customer's chat) learn of each committed
        # timeline event through its Channels group.
        from django.contrib.auth.models import Group

        from tickets.presenters import register_kinds
        from tickets.signals import ticket_event_appended

        register_kinds()

        ticket_event_appended.connect(_publish_event, dispatch_uid="tickets.publish_event")
        # Open sockets end with the sign-in they were opened with (support.websocket.SignedInConsumer).
        user_logged_out.connect(_signed_out, dispatch_uid="tickets.signed_out")
        # A session Django ended without a sign-out (another user signed in on the same browser): the
        # sockets opened with it check again, and end.
        from support.sessions import session_ended

        session_ended.connect(_session_ended, dispatch_uid="tickets.session_ended")
        post_save.connect(_account_changed, sender=settings.AUTH_USER_MODEL, dispatch_uid="tickets.account_changed")
        # A customer's profile moved to another login: the chat sockets of the login it leaves check
        # again, and end (their tickets are no longer that login's).
        from tickets.models import Customer

        pre_save.connect(_profile_login_before, sender=Customer, dispatch_uid="tickets.profile_login_before")
        post_save.connect(_profile_moved, sender=Customer, dispatch_uid="tickets.profile_moved")
        # A group left or a permission taken away: the pages that needed it stop (``may_watch``).
        user_model = get_user_model()
        for through in (user_model.groups.through, user_model.user_permissions.through, Group.permissions.through):
            uid = f"tickets.access_changed.{through.__name__}"
            m2m_changed.connect(_access_changed, sender=through, dispatch_uid=uid)


def _publish_event(sender: object, ticket_id: int, **kwargs: object) -> None:
    from tickets import realtime

    realtime.publish_event(ticket_id)


def _signed_out(sender: object, request: Any, user: Any, **kwargs: object) -> None:
    """Sent before the session is flushed: its sockets are told by its key."""
    from support.websocket import session_group
    from tickets import realtime

    key = getattr(getattr(request, "session", None), "session_key", None)
    if key:
        realtime.publish_sign_in_notice(session_group(key), {"type": "signin.ended"})


def _session_ended(sender: object, session_key: str, **kwargs: object) -> None:
    from support.websocket import session_group
    from tickets import realtime

    realtime.publish_sign_in_notice(session_group(session_key), {"type": "signin.changed"})


def _access_changed(sender: object, instance: Any, action: str, model: Any, pk_set: Any, **kwargs: object) -> None:
    """Groups or permissions changed, from either side: the sockets of every user touched check again
    (``pre_clear``: the users are read before they are cleared; the ring goes after commit)."""
    from django.contrib.auth.models import Group

    if action not in {"post_add", "post_remove", "pre_clear"}:
        return
    users = get_user_model()
    if isinstance(instance, users):  # a user's groups or permissions
        user_ids = [instance.pk]
    elif model is users:  # a group's or a permission's users, from its side
        user_ids = list(pk_set) if pk_set is not None else list(instance.user_set.values_list("pk", flat=True))
    elif isinstance(instance, Group):  # a group's permissions: all its members
        user_ids = list(instance.user_set.values_list("pk", flat=True))
    else:  # a permission's groups: their members
        groups = pk_set if pk_set is not None else instance.group_set.values_list("pk", flat=True)
        user_ids = list(users.objects.filter(groups__in=list(groups)).values_list("pk", flat=True).distinct())
    _ring_accounts(user_ids)


def _ring_accounts(user_ids: list[int]) -> None:
    from support.websocket import account_group
    from tickets import realtime

    for user_id in user_ids:
        group = account_group(user_id)
        transaction.on_commit(lambda group=group: realtime.publish_sign_in_notice(group, {"type": "signin.changed"}))


def _account_changed(sender: object, instance: Any, created: bool, update_fields: Any = None, **kwargs: object) -> None:
    """A password set, an account deactivated: its sockets check their sign-in again (after commit)."""
    if created or (update_fields is not None and set(update_fields) <= {"last_login"}):
        return
    _ring_accounts([instance.pk])


def _profile_login_before(sender: object, instance: Any, **kwargs: object) -> None:
    """The login the profile is on as stored, read before the save (told after it, in post_save)."""
    before = None
    if instance.pk is not None:
        before = sender._default_manager.filter(pk=instance.pk).values_list("user_id", flat=True).first()
    instance._login_before = before


def _profile_moved(sender: object, instance: Any, created: bool, **kwargs: object) -> None:
    before = getattr(instance, "_login_before", None)
    instance._login_before = None
    if not created and before is not None and before != instance.user_id:
        _ring_accounts([before])
