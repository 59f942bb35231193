"""Sessions in the database, as Django keeps them, with keys checked before they reach a query, and
a word to whoever watches when one ends."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore
from django.db import transaction
from django.dispatch import Signal

# Sent after commit when a session's row is deleted: signed out, or ended by Django without a sign-out
# (signing in as another user on the same browser flushes the one before; a new key at sign-in or a
# password change deletes the old one). Argument: session_key, the key that no longer opens anything.
session_ended = Signal()


class SessionStore(DatabaseSessionStore):
    """Django's database sessions. A key the site could never have issued (Django's are ASCII letters
    and digits; a quoted cookie's octal escapes can carry a NUL, which PostgreSQL refuses in a query)
    is no session, as a key too short is: the visitor is signed out, not shown a server error."""

    # When the session read by ``load`` ends, as stored (None: no session was found). A socket opened
    # with it closes then (``support.websocket.SignedInConsumer``): an expiry sends no notice.
    stored_expiry: datetime | None = None

    def _get_session_from_db(self) -> Any:
        row = super()._get_session_from_db()
        self.stored_expiry = row.expire_date if row is not None else None
        return row

    def _validate_session_key(self, key: Any) -> bool:
        return bool(super()._validate_session_key(key)) and key.isascii() and key.isalnum()

    def delete(self, session_key: str | None = None) -> None:
        key = session_key if session_key is not None else self.session_key
        super().delete(session_key)
        if key:
            transaction.on_commit(lambda: session_ended.send(sender=SessionStore, session_key=key))
