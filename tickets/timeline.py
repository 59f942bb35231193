"""The timeline's event kinds: each app declares the kinds it appends, and how (if at all) the
customer sees them, here, when it starts (``AppConfig.ready``). ``tickets`` knows no other app's
kinds; ``tickets.presenters`` asks this registry.

A presenter gets the event and its payload (a dict) and returns the customer's item without
``seq`` and ``at`` (see ``tickets.presenters``), or None to show nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tickets.models import TicketEvent

Presenter = Callable[[TicketEvent, dict[str, Any]], dict[str, Any] | None]


@dataclass(frozen=True)
class EventKind:
    name: str
    app: str
    description: str
    # How the customer sees it; None: never shown to the customer (staff and the admin still do).
    present: Presenter | None = None


_KINDS: dict[str, EventKind] = {}


def register(name: str, *, app: str, description: str, present: Presenter | None = None) -> EventKind:
    """Declare an event kind. Declaring one twice from another app is a mistake, refused."""
    known = _KINDS.get(name)
    if known is not None and known.app != app:
        raise ValueError(f"event kind {name!r} is already declared by {known.app}")
    kind = _KINDS[name] = EventKind(name=name, app=app, description=description, present=present)
    return kind


def kind(name: str) -> EventKind | None:
    return _KINDS.get(name)


def kinds() -> list[EventKind]:
    return sorted(_KINDS.values(), key=lambda k: (k.app, k.name))


# --- helpers for presenters -------------------------------------------------------------------


def label(payload: dict[str, Any], fallback: str) -> str:
    text = payload.get("label")
    return text.strip() if isinstance(text, str) and text.strip() else fallback


def notice(tone: str, fallback: str = "") -> Presenter:
    """A line in the conversation: the event's ``label`` (or ``fallback``); nothing if neither."""

    def present(event: TicketEvent, payload: dict[str, Any]) -> dict[str, Any] | None:
        text = label(payload, fallback)
        return {"kind": "notice", "tone": tone, "text": text} if text else None

    return present


def typing(on: bool) -> Presenter:
    """No line: the assistant's typing indicator goes on or off; ``run``, the run it is about (a
    later run's answer may be streaming already when an earlier one's end arrives)."""

    def present(event: TicketEvent, payload: dict[str, Any]) -> dict[str, Any]:
        item: dict[str, Any] = {"kind": "state", "typing": on}
        if isinstance(payload.get("run_id"), int):
            item["run"] = payload["run_id"]
        return item

    return present
