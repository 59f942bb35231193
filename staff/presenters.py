"""The staff's view of a ticket's timeline: everything, public or not, in plain words.

``present(event)`` gives a dict the staff templates render (escaped by Django):

- ``kind="message"``: ``author`` (customer, agent, staff, system), ``author_name``, ``text``,
  ``internal`` (an internal note or a system note: never shown to the customer), ``attachments``
  (the files sent with it, as ``tickets.presenters.attachment_item`` gives them),
  ``client_msg_id`` (a person's message: the id its form sent; otherwise empty);
- ``kind="line"``: ``text`` (what happened) and ``detail`` (the facts, short), ``tone``.

Every item has ``seq``, ``at`` (a datetime) and ``actor`` (who did it, in words).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tickets import timeline
from tickets.models import ActorKind, AuthorKind, Ticket, TicketEvent, TicketStatus
from tickets.presenters import attachment_items
from tickets.services import staff_name

DETAIL_MAX_CHARS = 300
# A rating at or below this is shown as bad news.
LOW_RATING = 2


def _actor(event: TicketEvent, customer_name: str) -> str:
    if event.actor_kind == ActorKind.STAFF:
        return staff_name(event.actor_user)
    if event.actor_kind == ActorKind.CUSTOMER:
        return customer_name
    if event.actor_kind == ActorKind.AGENT:
        return "Agent" + (f" ({event.actor_ref})" if event.actor_ref else "")
    return "System" + (f" ({event.actor_ref})" if event.actor_ref else "")


def _message(event: TicketEvent, payload: dict[str, Any], customer_name: str) -> dict[str, Any]:
    author = payload.get("author_kind") or event.actor_kind
    names = {AuthorKind.CUSTOMER: customer_name, AuthorKind.AGENT: "Agent", AuthorKind.SYSTEM: "System"}
    # A colleague by their name or username (the payload holds the signature the customer read).
    name = (staff_name(event.actor_user) if author == AuthorKind.STAFF and event.actor_user else None) or payload.get(
        "author_name"
    )
    return {
        "kind": "message",
        "author": author,
        "author_name": name or names.get(author, author),
        "text": str(payload.get("body", "")),
        "internal": not event.is_public,
        "attachments": attachment_items(payload),
        # A person's own reply or note, by the id its form sent: the page then knows the words it
        # kept in the browser were stored (staff.js), and drops them.
        "client_msg_id": str(payload.get("client_msg_id") or "") if author == AuthorKind.STAFF else "",
    }


def _status_words(status: Any) -> str:
    return TicketStatus(status).label if status in TicketStatus.values else str(status)


def _detail(event: TicketEvent, payload: dict[str, Any]) -> str:
    if event.kind == "status_changed":
        words = f"{_status_words(payload.get('from'))} → {_status_words(payload.get('to'))}"
        return words + (f" ({payload['reason']})" if payload.get("reason") else "")
    if event.kind == "assigned":
        return f"to {payload.get('assignee') or 'nobody'}"
    if event.kind == "rated":
        words = f"{payload.get('score')} out of 5"
        if payload.get("previous_score") is not None:
            words += f" (was {payload['previous_score']})"
        if payload.get("comment"):
            words += f": “{payload['comment']}”"
        return words[:DETAIL_MAX_CHARS]
    facts = []
    for key in ("tool", "label", "reason", "decision", "note", "amount", "error", "outcome"):
        value = payload.get(key)
        if value not in (None, "", [], {}):
            facts.append(f"{key}: {value}")
    return "; ".join(facts)[:DETAIL_MAX_CHARS]


def present(event: TicketEvent, *, customer_name: str) -> dict[str, Any]:
    payload = event.payload if isinstance(event.payload, dict) else {}
    base = {"seq": event.seq, "at": event.created_at, "actor": _actor(event, customer_name), "event_kind": event.kind}
    if event.kind == "message":
        return {**base, **_message(event, payload, customer_name)}
    declared = timeline.kind(event.kind)
    text = declared.description if declared is not None else event.kind.replace("_", " ")
    tone = "bad" if event.kind.endswith(("failed", "escalated", "expired")) else "info"
    if event.kind == "rated" and isinstance(payload.get("score"), int):
        tone = "bad" if payload["score"] <= LOW_RATING else "ok"
    return {**base, "kind": "line", "text": text, "detail": _detail(event, payload), "tone": tone}


def present_all(events: Iterable[TicketEvent], *, ticket: Ticket) -> tuple[list[dict[str, Any]], int]:
    items, last_seq = [], 0
    for event in events:
        last_seq = max(last_seq, event.seq)
        items.append(present(event, customer_name=ticket.customer.name))
    return items, last_seq
