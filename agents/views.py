"""The customer's answer to a question the agent asked before money moves (agents.confirmation)."""

from __future__ import annotations

import json
from typing import Any

from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from agents.confirmation import ConfirmationClosed, confirmation_decide
from agents.timeline_kinds import answer_words
from support import fields
from tickets.pages import login_url_back_to
from tickets.selectors import ticket_get_for_customer

ANSWERS = {"confirm": True, "cancel": False}
FIELDS = ("answer", "digest")


@require_POST
def confirmation_answer(request: HttpRequest, ticket_id: int, call_id: int) -> JsonResponse:
    """POST {"answer": "confirm"|"cancel", "digest": ...}: 200 with the answer that stands and the card's
    words for it ({"decision", "text"}; also on a repeat of the same answer), 400 bad input (any other
    field too), 404 not the customer's ticket, 409 already answered otherwise, expired, or changed."""
    if not request.user.is_authenticated:
        # The session ended while the question was on screen: say so (the page offers to sign in).
        return JsonResponse(
            {"error": "You were signed out, so nothing was done. Sign in again to answer.", "code": "signed_out"},
            status=401,
        )
    try:
        ticket = ticket_get_for_customer(user=request.user, ticket_id=ticket_id)
    except Http404:
        # Anyone else, said as for a missing ticket: most often another customer signed in on this browser
        # while the question was on screen (a shared computer); the card offers to sign in again.
        return JsonResponse(
            {
                "error": "This question is not open to the account signed in on this browser now, so nothing was done.",
                "code": "not_this_account",
                "login_url": login_url_back_to(ticket_id),
            },
            status=404,
        )
    if request.content_type in {"multipart/form-data", "application/x-www-form-urlencoded"}:
        # A plain form (its body already read by the middleware that checks input): its fields.
        data: Any = {name: request.POST.get(name) for name in FIELDS}
        unread = fields.form_unread(request, FIELDS)
        twice = fields.form_twice(request)
        if twice:  # answer=cancel&answer=confirm counted as its last: a Confirm, and the refund paid
            return JsonResponse({"error": f"{fields.twice_words(twice)}, so nothing was done."}, status=400)
    else:
        try:
            data = json.loads(request.body or b"{}")
        except (ValueError, UnicodeDecodeError, RecursionError):
            return JsonResponse({"error": "The request body must be JSON."}, status=400)
        unread = fields.unread(data, FIELDS) if isinstance(data, dict) else []
    if unread:
        # The answer is to the question shown, exactly: one that says more (another amount, another
        # order) was taken as a Confirm of the question's own amount, and that amount was paid.
        return JsonResponse(
            {"error": f"An answer is only Confirm or Cancel; {fields.listed(unread)} cannot be read, so nothing "
             "was done."},
            status=400,
        )  # fmt: skip
    answer = data.get("answer") if isinstance(data, dict) else None
    if not isinstance(answer, str) or answer not in ANSWERS or not isinstance(data.get("digest"), str):
        return JsonResponse({"error": 'Send {"answer": "confirm" or "cancel", "digest": "..."}.'}, status=400)
    try:
        decision = confirmation_decide(
            ticket_id=ticket.pk, call_id=call_id, user=request.user, confirm=ANSWERS[answer],
            digest=data["digest"],
        )  # fmt: skip
    except ConfirmationClosed as exc:
        status = 404 if exc.code == "not_found" else 409
        return JsonResponse({"error": exc.messages[0], "code": exc.code}, status=status)
    return JsonResponse({"decision": decision, "text": answer_words(decision)})
