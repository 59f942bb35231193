"""The timeline event kinds the agent appends, declared with ``tickets.timeline`` (see there)."""

from __future__ import annotations

from typing import Any

from tickets import timeline
from tickets.timeline import notice, typing

APP = "agents"


def _question(event: object, payload: dict[str, Any]) -> dict[str, Any] | None:
    """A question with Confirm and Cancel buttons in the customer's chat (see chat.js)."""
    if not isinstance(payload.get("question"), str) or not isinstance(payload.get("call_id"), int):
        return None
    return {
        "kind": "confirm",
        "text": payload["question"],
        "call_id": payload["call_id"],
        "digest": str(payload.get("digest", "")),
        "expires_at": str(payload.get("expires_at", "")),
        "typing": False,
    }


def answer_words(decision: object) -> str:
    """What the question's card says of the customer's answer: one wording, whether the page learns
    it from the answer to the click, the socket's event or a reload."""
    return "You confirmed." if decision == "confirmed" else "You cancelled; nothing was done."


def _answer(event: object, payload: dict[str, Any]) -> dict[str, Any]:
    confirmed = payload.get("decision") == "confirmed"
    return {
        "kind": "notice",
        "tone": "ok" if confirmed else "info",
        "text": answer_words(payload.get("decision")),
        "answers": payload.get("call_id"),
    }


def _expired(event: object, payload: dict[str, Any]) -> dict[str, Any]:
    text = "The question expired, so nothing was done."
    return {"kind": "notice", "tone": "warn", "text": text, "answers": payload.get("call_id")}


def _withdrawn(event: object, payload: dict[str, Any]) -> dict[str, Any]:
    text = "This question was withdrawn, so nothing was done."
    return {"kind": "notice", "tone": "info", "text": text, "answers": payload.get("call_id")}


def _approved_withdrawn(event: object, payload: dict[str, Any]) -> dict[str, Any]:
    text = "The approved request was stopped before it was carried out, so nothing was done."
    return {"kind": "notice", "tone": "info", "text": text}


def register_kinds() -> None:
    def add(name: str, description: str, present: timeline.Presenter | None = None) -> None:
        timeline.register(name, app=APP, description=description, present=present)

    add("agent_run_started", "The agent took the customer's messages into a turn.", typing(True))
    add("agent_run_running", "A paused run goes on after a staff decision.", typing(True))
    for status, words in [
        ("completed", "replied"),
        ("handed_off", "handed the ticket to a person"),
        ("waiting_approval", "paused for a staff approval"),
        ("waiting_confirmation", "paused for the customer to confirm"),
        ("failed", "failed and was parked with a person"),
    ]:
        add(f"agent_run_{status}", f"The turn ended: the agent {words}.", typing(False))
    add("agent_run_recovered", "A worker took over a run whose worker died, with the recovery note.")
    add("agent_step_failed", "A step failed (bad model output, an outage, a tool or database error).")
    add("agent_run_start_failed", "Starting a run failed (no run to count it on): counted on the ticket.")
    add("agent_profile_changed", "A paused run was moved to another agent profile version by staff.")
    add("agent_parked", "Too many failures in a row: the ticket went to a person.")
    add("tool_call_started", "The intent of a tool call (its label, if any, is shown).", notice("info"))
    add("tool_call_finished", "A tool call's outcome.")
    add("tool_call_uncertain", "A tool call that may or may not have taken effect.")
    add("tool_call_escalated", "A call ended in a way only a person can settle.")
    add("confirmation_requested", "The customer is asked to confirm a call (a refund) before it runs.", _question)
    add("confirmation_decided", "The customer confirmed or cancelled.", _answer)
    add("confirmation_expired", "The customer did not answer in time; nothing was done.", _expired)
    add("confirmation_withdrawn", "The run ended before the customer answered; nothing was done.", _withdrawn)
    add(
        "approved_call_withdrawn",
        "A call staff approved ended unrun (a person took the ticket, or its run ended first); nothing was done.",
        _approved_withdrawn,
    )
    add("refund_succeeded", "The payment provider refunded.", notice("ok", "Your refund was issued."))
    add("refund_pending", "The provider accepted a refund and has not settled it yet.")
    add("refund_failed", "The provider refused or failed a refund.")
    add("refund_reconciled", "The reconciler settled a refund from the provider's records.")
    add("refund_escalated", "A refund that did not go through was handed to a person.")
