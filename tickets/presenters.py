"""What the customer sees of a ticket's timeline, in the customer's words.

``present_event`` turns one public TicketEvent into a plain dict (the frame the
chat page renders, live over the WebSocket and on the server-rendered page) or
None when the customer has nothing to see for it. Every text here is plain
text: the page escapes it (templates) or sets it with ``textContent`` (chat.js).

Every item has ``seq`` and ``at`` (ISO 8601). Then, by ``kind``:

- ``kind="message"``: ``author`` (customer, agent, staff), ``author_name``, ``text``,
  ``message_id``, ``client_msg_id`` (the sender's own, customer messages only), and
  ``attachments`` when files came with it: each ``id``, ``name``, ``type``, ``size``,
  ``size_text`` ("245 KB"), ``url`` and ``image`` (shown as a picture, else a link);
- ``kind="notice"``: ``text`` and ``tone`` (info, ok, warn, bad), a line in the
  conversation such as "Looking up your order";
- ``kind="state"``: no text, only what changes below.

Any item may also carry ``status`` (the ticket's status after it) and
``typing`` (whether the assistant is now working on an answer). On the server-rendered
page, the first item of each day also carries ``day`` ("Today", "Yesterday", "March 3, 2026"):
the date separator above it (``with_day_separators``; chat.js places the live ones).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.urls import reverse
from django.utils import timezone
from django.utils.dateformat import format as format_date
from django.utils.text import Truncator
from django.utils.timesince import timesince

from tickets import timeline
from tickets.attachments import size_words
from tickets.models import ActorKind, Attachment, AuthorKind, Ticket, TicketEvent, TicketStatus

# The status line and the badges, in the customer's words.
STATUS_TEXT: dict[str, str] = {
    TicketStatus.OPEN: "Open",
    TicketStatus.WAITING_ON_CUSTOMER: "Waiting for your reply",
    TicketStatus.PENDING_APPROVAL: "Under review by our team",
    TicketStatus.WITH_HUMAN: "With a person from our team",
    TicketStatus.RESOLVED: "Resolved",
    TicketStatus.CLOSED: "Closed",
}
TYPING_TEXT = "Our assistant is typing…"

AUTHOR_NAMES: dict[str, str] = {
    AuthorKind.CUSTOMER: "You",
    AuthorKind.AGENT: "Support assistant",
    AuthorKind.STAFF: "Support team",
}


def status_text(status: str) -> str:
    return STATUS_TEXT.get(status, status.replace("_", " ").capitalize())


def updated_text(when: datetime, *, now: datetime | None = None) -> str:
    now = now or timezone.now()
    if (now - when).total_seconds() < 60:
        return "just now"
    return f"{timesince(when, now, depth=1)} ago"


PREVIEW_MAX_CHARS = 90


def message_preview(payload: Any) -> dict[str, str] | None:
    """My tickets' line under a subject: who wrote last and the start of what they wrote, from a
    message event's payload (``selectors.tickets_for_customer``'s ``last_message``)."""
    if not isinstance(payload, dict) or not isinstance(payload.get("body"), str):
        return None
    author = payload.get("author_kind")
    text = Truncator(" ".join(payload["body"].split())).chars(PREVIEW_MAX_CHARS)
    if author == AuthorKind.STAFF and isinstance(payload.get("author_name"), str) and payload["author_name"]:
        return {"author": payload["author_name"], "text": text}
    return {"author": AUTHOR_NAMES.get(author, ""), "text": text}


def day_label(when: datetime, *, now: datetime | None = None) -> str:
    """The date separator's words, in the current time zone: "Today", "Yesterday", "March 3, 2026"."""
    day = timezone.localdate(when)
    today = timezone.localdate(now or timezone.now())
    if day == today:
        return "Today"
    if day == today - timedelta(days=1):
        return "Yesterday"
    return format_date(day, "F j, Y")


def with_day_separators(items: list[dict[str, Any]], *, now: datetime | None = None) -> list[dict[str, Any]]:
    """Mark the first shown item (message or notice) of each day with ``day`` (the words) and
    ``day_key`` (YYYY-MM-DD): a separator goes above it."""
    now = now or timezone.now()
    previous = None
    for item in items:
        if item.get("kind") not in {"message", "notice"}:
            continue
        when = datetime.fromisoformat(item["at"])
        day = timezone.localdate(when)
        if day != previous:
            item["day"], item["day_key"] = day_label(when, now=now), day.isoformat()
            previous = day
    return items


def _rated(event: TicketEvent, payload: dict[str, Any]) -> dict[str, Any]:
    changed = payload.get("previous_score") is not None
    text = "Thanks, your rating was updated." if changed else "Thanks for your rating."
    return {"kind": "notice", "tone": "ok", "text": text}


def attachment_item(attachment: Attachment | dict[str, Any]) -> dict[str, Any]:
    """One attached file as pages show it, from its row or its entry in a message event."""
    if isinstance(attachment, Attachment):
        entry = {
            "id": attachment.pk,
            "name": attachment.original_name,
            "type": attachment.content_type,
            "size": attachment.size,
        }
    else:
        entry = {key: attachment.get(key) for key in ("id", "name", "type", "size")}
    return {
        **entry,
        "size_text": size_words(int(entry["size"] or 0)),
        "url": reverse("tickets:attachment", args=[int(entry["id"])]),
        "image": str(entry["type"]).startswith("image/"),
    }


def attachment_items(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The files a message event lists (none for events written before there were files)."""
    entries = payload.get("attachments")
    if not isinstance(entries, list):
        return []
    return [attachment_item(e) for e in entries if isinstance(e, dict) and isinstance(e.get("id"), int)]


def _message(event: TicketEvent) -> dict[str, Any] | None:
    payload = event.payload
    author = payload.get("author_kind") or event.actor_kind
    body = payload.get("body")
    if not isinstance(body, str) or not body:
        return None
    if author == AuthorKind.SYSTEM:
        return {"kind": "notice", "text": body, "tone": "info"}
    if author not in AUTHOR_NAMES:
        return None
    item: dict[str, Any] = {
        "kind": "message",
        "author": author,
        # A person signs with their own name (fixed in the event when they wrote).
        "author_name": (author == AuthorKind.STAFF and payload.get("author_name")) or AUTHOR_NAMES[author],
        "text": body,
        "message_id": payload.get("message_id"),
    }
    if author == AuthorKind.CUSTOMER:
        item["client_msg_id"] = payload.get("client_msg_id")
    files = attachment_items(payload)
    if files:
        item["attachments"] = files
    if isinstance(payload.get("stream"), int):
        item["stream"] = payload["stream"]  # the streamed text this message replaces
    return item


def _status_changed(event: TicketEvent) -> dict[str, Any]:
    to = str(event.payload.get("to", ""))
    item: dict[str, Any] = {"kind": "state", "status": to}
    # pending_approval: the status line says "Under review by our team", and the line in the
    # conversation is the approval_requested event's (it comes right after): one line, not two.
    if to == TicketStatus.WITH_HUMAN:
        text = (
            "A person from our team has joined the conversation."
            if event.actor_kind == ActorKind.STAFF
            else "A person from our team will take it from here and reply in this chat."
        )
        item.update(kind="notice", tone="info", text=text, typing=False)
    elif to == TicketStatus.OPEN and event.payload.get("from") == TicketStatus.WITH_HUMAN:
        item.update(kind="notice", tone="info", text="Our assistant is back to help you in this chat.")
    elif to == TicketStatus.RESOLVED:
        item.update(kind="notice", tone="ok", text="This ticket was marked as resolved. Reply here if you need more.")
    elif to == TicketStatus.CLOSED:
        item.update(kind="notice", tone="info", text="This ticket was closed.", typing=False)
    return item


def present_event(event: TicketEvent) -> dict[str, Any] | None:
    """The customer's view of one event, or None. Non-public events are never shown; kinds
    are presented as the app that declared them says (``tickets.timeline``)."""
    if not event.is_public:
        return None
    declared = timeline.kind(event.kind)
    if declared is None or declared.present is None:
        return None  # kinds the customer has no words for are not shown
    payload = event.payload if isinstance(event.payload, dict) else {}
    item = declared.present(event, payload)
    if item is None:
        return None
    return {"seq": event.seq, "at": event.created_at.isoformat(), **item}


def register_kinds() -> None:
    """The kinds the ledger itself appends (called from TicketsConfig.ready)."""
    timeline.register("ticket_opened", app="tickets", description="The customer opened the ticket.")
    timeline.register("message", app="tickets", description="A message was posted.", present=lambda e, p: _message(e))
    timeline.register(
        "status_changed",
        app="tickets",
        description="The ticket's status changed (TICKET_TRANSITIONS).",
        present=lambda e, p: _status_changed(e),
    )
    timeline.register("assigned", app="tickets", description="The ticket was assigned to a member of staff.")
    timeline.register("edited", app="tickets", description="A member of staff edited the subject or the priority.")
    timeline.register(
        "rated", app="tickets", description="The customer rated the help they got (1 to 5).", present=_rated
    )


def present_events(events: Iterable[TicketEvent]) -> tuple[list[dict[str, Any]], int]:
    """The presented items, and the highest seq looked at (shown or not): where a replay resumes."""
    items: list[dict[str, Any]] = []
    last_seq = 0
    for event in events:
        last_seq = max(last_seq, event.seq)
        item = present_event(event)
        if item is not None:
            items.append(item)
    return items, last_seq


def mark_answered(items: list[dict[str, Any]]) -> None:
    """A question in the chat (``kind="confirm"``) that a later item answers is shown answered:
    its buttons are gone on a page loaded after the answer."""
    latest: dict[Any, dict[str, Any]] = {}  # each call's latest question so far, in timeline order
    for item in items:
        if item["kind"] == "confirm":
            item["answered"] = False
            latest[item.get("call_id")] = item
        elif item.get("answers") is not None and item["answers"] in latest:
            # An answer is to the question shown before it; a call asked again has a new one. Its words
            # ("Confirmed", "The question expired, so nothing was done") are what the card then says.
            latest[item["answers"]]["answered"] = True
            latest[item["answers"]]["answered_text"] = item.get("text") or "Answered."


def chat_state(*, ticket: Ticket, items: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the page starts: the status, typing if a run started and has not ended, and the latest
    run the items name (0 if none: the page keeps words of runs up to it off while a person has the
    ticket, see chat.js).

    The status is the last one the items show, else the ticket's: the items were read after the
    ticket, so a change committed in between is in them (the page goes on from their last event)."""
    typing = False
    status = ticket.status
    run = 0
    for item in items:
        if "typing" in item:
            typing = bool(item["typing"])
        if isinstance(item.get("status"), str):
            status = item["status"]
        if isinstance(item.get("run"), int):
            run = max(run, item["run"])
    return {"status": status, "typing": typing, "run": run}
