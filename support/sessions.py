"""Sessions in the database, as Django keeps them, with keys checked before they reach a query."""

from __future__ import annotations

from typing import Any

from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore


class SessionStore(DatabaseSessionStore):
    """Django's database sessions. A key the site could never have issued (Django's are ASCII letters
    and digits; a quoted cookie's octal escapes can carry a NUL, which PostgreSQL refuses in a query)
    is no session, as a key too short is: the visitor is signed out, not shown a server error."""

    def _validate_session_key(self, key: Any) -> bool:
        return bool(super()._validate_session_key(key)) and key.isascii() and key.isalnum()
