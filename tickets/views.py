"""The customer's pages: my tickets, open a ticket, the chat, and sending a message.

Thin: parse, reach the ticket through ``selectors.ticket_get_for_customer`` (the
one door; 404 for anyone but its customer), call one service, render.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.files.storage import default_storage
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from support import fields
from support.middleware import FORM_TYPES
from support.throttle import over_limit, too_many
from tickets import attachments, pages, presenters, selectors, services
from tickets.models import (
    HANDLE_PERMISSION,
    RATING_COMMENT_MAX_CHARS,
    Attachment,
    AuthorKind,
    Customer,
    Message,
    Ticket,
    ticket_can_be_rated,
)

logger = logging.getLogger(__name__)


def _customer_or_404(request: HttpRequest) -> Customer:
    customer = selectors.customer_for_user(user=request.user)
    if customer is None:
        raise Http404("No customer profile")
    return customer


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        return redirect("login")
    if request.user.has_perm(HANDLE_PERMISSION):
        return redirect("staff:inbox")
    if request.user.is_staff:
        return redirect("/staff/approvals/")
    return redirect("tickets:list")


@login_required
@require_GET
def ticket_list(request: HttpRequest) -> HttpResponse:
    _customer_or_404(request)
    tickets = selectors.tickets_for_customer(user=request.user)
    rows = [
        {
            "ticket": t,
            "status_text": presenters.status_text(t.status),
            "updated": presenters.updated_text(t.changed_at),
            "preview": presenters.message_preview(t.last_message),
            "unread": t.unread,
        }
        for t in tickets
    ]
    return render(request, "tickets/list.html", {"rows": rows})


NEW_TICKET_FIELDS = ("subject", "body", "client_ref")


@never_cache  # Back to the form gets a fresh one (a new reference), not the page it sent
@login_required
@require_http_methods(["GET", "POST"])
def ticket_new(request: HttpRequest) -> HttpResponse:
    customer = _customer_or_404(request)
    if request.method == "GET":
        return _new_form(request, client_ref=uuid.uuid4().hex)
    subject = request.POST.get("subject", "")
    body = request.POST.get("body", "")
    # Generated per form render: a double submit of the same form opens one ticket.
    client_ref = request.POST.get("client_ref", "").strip() or None
    unread, twice = fields.form_unread(request, NEW_TICKET_FIELDS), fields.form_twice(request)
    if unread or twice:  # read by nobody, dropped without a word (a photo: the ticket opened without it)
        error = (
            f"This form does not read {fields.listed(unread)}; no ticket was opened. Photos can be sent in "
            "the chat once the ticket is open."
            if unread
            else f"{fields.twice_words(twice)}; no ticket was opened. Send the form once more."
        )
        return _new_form(
            request, client_ref=client_ref or uuid.uuid4().hex, subject=subject, body=body, status=400, error=error
        )
    if client_ref is not None and len(client_ref) > services.CLIENT_REF_MAX_CHARS:
        # Not cut short: two references sharing a prefix would open one ticket and lose a message.
        return _new_form(
            request, client_ref=uuid.uuid4().hex, subject=subject, body=body, status=400,
            error=f"The form's reference is longer than {services.CLIENT_REF_MAX_CHARS} characters; send it again.",
        )  # fmt: skip
    existing = selectors.ticket_for_client_ref(customer=customer, client_ref=client_ref) if client_ref else None
    if existing is not None:
        other = services.reference_for_other_words(existing, subject=subject, body=body)
        if other is None:
            return redirect("tickets:chat", ticket_id=existing.pk)  # a retried submit: the same ticket, not counted
        # The form sent again with other words (the Back button): a ticket of its own.
        client_ref = other
        existing = selectors.ticket_for_client_ref(customer=customer, client_ref=client_ref)
        if existing is not None:
            return redirect("tickets:chat", ticket_id=existing.pk)
    wait = over_limit(request, group="tickets.new", key="user", rate_setting="CUSTOMER_TICKET_RATE")
    if wait is not None:
        # The form again, with the words and the same reference (sent again after the wait: one
        # ticket): a bare line of text held nothing of what the customer wrote.
        held = _new_form(
            request, client_ref=client_ref or uuid.uuid4().hex, subject=subject, body=body, status=429,
            error=f"You have opened many tickets just now; please try again in {wait} s. Your message is kept "
            "below: press Send then.",
        )  # fmt: skip
        held["Retry-After"] = str(wait)
        return held
    try:
        ticket, _ = services.ticket_open(
            customer=customer, subject=subject, body=body, client_ref=client_ref, unseen_client_ref=True
        )
    except ValidationError as exc:
        return _new_form(
            request,
            client_ref=client_ref or uuid.uuid4().hex,
            subject=subject,
            body=body,
            error=exc.messages[0],
            status=400,
        )
    return redirect("tickets:chat", ticket_id=ticket.pk)


def _new_form(
    request: HttpRequest, *, client_ref: str, subject: str = "", body: str = "", error: str = "", status: int = 200
) -> HttpResponse:
    context = {
        "client_ref": client_ref,
        "subject": subject,
        "body": body,
        "error": error,
        "max_chars": services.MESSAGE_MAX_CHARS,
        "subject_max_chars": services.SUBJECT_MAX_CHARS,
    }
    return render(request, "tickets/new.html", context, status=status)


@login_required
@require_GET
def ticket_chat(request: HttpRequest, ticket_id: int) -> HttpResponse:
    ticket = selectors.ticket_get_for_customer(user=request.user, ticket_id=ticket_id)
    return _chat_page(request, ticket, mark_seen=True)


RATING_FIELDS = ("score", "comment")
RATING_CHOICES = [(1, "Very poor"), (2, "Poor"), (3, "Okay"), (4, "Good"), (5, "Excellent")]


def _chat_page(
    request: HttpRequest,
    ticket: Ticket,
    *,
    mark_seen: bool = False,
    rating_error: str = "",
    rating_form: dict[str, str] | None = None,
    status: int = 200,
) -> HttpResponse:
    items, last_seq = presenters.present_events(selectors.ticket_timeline(ticket=ticket, public_only=True))
    if mark_seen:
        services.ticket_mark_seen(ticket=ticket, seq=last_seq)
    presenters.mark_answered(items)
    state = presenters.chat_state(ticket=ticket, items=items)
    current = selectors.ticket_rating(ticket=ticket)
    typed = rating_form or {}
    context = {
        "ticket": ticket,
        "items": presenters.with_day_separators(items),
        "last_seq": last_seq,
        "state": state,
        "status_text": presenters.TYPING_TEXT if state["typing"] else presenters.status_text(state["status"]),
        "author_names": presenters.AUTHOR_NAMES,
        "rating": {
            "shown": ticket_can_be_rated(ticket) or bool(rating_error),
            "current": current,
            "score": typed.get("score", str(current.score) if current else ""),
            "comment": typed.get("comment", current.comment if current else ""),
            "choices": [(str(value), label) for value, label in RATING_CHOICES],
            "comment_max_chars": RATING_COMMENT_MAX_CHARS,
            "error": rating_error,
        },
        "chat_config": {
            "ticketId": ticket.pk,
            "afterSeq": last_seq,
            "status": state["status"],
            "typing": state["typing"],
            "run": state["run"],
            "statusText": presenters.STATUS_TEXT,
            "typingText": presenters.TYPING_TEXT,
            "authorNames": presenters.AUTHOR_NAMES,
            "maxChars": services.MESSAGE_MAX_CHARS,
            "attachMaxBytes": attachments.max_bytes(),
            "attachMaxFiles": attachments.max_files(),
            "loginUrl": _login_url(ticket.pk),
            # A message the ticket was closed before it reached: sent in a new ticket, with its words.
            "newTicketUrl": reverse("tickets:new"),
            "subject": ticket.subject,
            "csrfCookie": settings.CSRF_COOKIE_NAME,
        },
        "attach_accept": attachments.ACCEPT_ATTRIBUTE,
    }
    return render(request, "tickets/chat.html", context, status=status)


@require_POST
def ticket_rate(request: HttpRequest, ticket_id: int) -> HttpResponse:
    """POST score (1 to 5) and comment from the chat's rating form: back to the chat, or the chat
    again with the reason (400 for a bad form, 409 for a ticket not resolved). Signed out (the session
    ended while the chat was open): to sign in, then back to the chat, saying nothing was done."""
    if not request.user.is_authenticated:
        return pages.sign_in_again(request, reverse("tickets:chat", args=[ticket_id]))
    ticket = selectors.ticket_get_for_customer(user=request.user, ticket_id=ticket_id)
    form = {"score": request.POST.get("score", ""), "comment": request.POST.get("comment", "")}
    unread, twice = fields.form_unread(request, RATING_FIELDS), fields.form_twice(request)
    if unread or twice:  # read by nobody, dropped without a word (a comment sent as "comments")
        error = (
            f"The rating form does not read {fields.listed(unread)}; nothing was rated. Send a score and a comment."
            if unread
            else f"{fields.twice_words(twice)}; nothing was rated. Send one score and one comment."
        )
        return _chat_page(request, ticket, rating_error=error, rating_form=form, status=400)
    try:
        services.ticket_rate(ticket=ticket, user=request.user, score=form["score"], comment=form["comment"])
    except services.RatingRefused as exc:
        return _chat_page(request, ticket, rating_error=exc.messages[0], rating_form=form, status=409)
    except ValidationError as exc:
        return _chat_page(request, ticket, rating_error=exc.messages[0], rating_form=form, status=400)
    return redirect(reverse("tickets:chat", args=[ticket.pk]) + "#chat-rating")


def _message_json(message: Message, *, stored: list[Attachment] | None = None) -> dict[str, Any]:
    """The message as the chat's script reads it; ``stored``: its attachments, when the caller
    knows them (else they are read)."""
    if stored is None:
        stored = list(message.attachments.all())
    return {
        "id": message.pk,
        "client_msg_id": message.client_msg_id,
        "author": message.author_kind,
        "text": message.body,
        "created_at": message.created_at.isoformat(),
        "attachments": [presenters.attachment_item(a) for a in stored],
    }


def _login_url(ticket_id: int) -> str:
    return pages.login_url_back_to(ticket_id)


class _Refusal(Exception):
    def __init__(self, message: str, status: int = 400, file_index: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.file_index = file_index


def _refused(message: str, status: int, file_index: int | None) -> JsonResponse:
    """A refusal as the chat reads it: its reason, and which of the files sent it is about (from 0),
    when it is about one (the chat gives the others back to send again)."""
    body: dict[str, Any] = {"error": message}
    if file_index is not None:
        body["file_index"] = file_index
    return JsonResponse(body, status=status)


# What a message is sent with (support.fields: any other field is refused, not dropped: a photo sent as
# ``file`` was lost, the message stored without it).
MESSAGE_FIELDS = ("client_msg_id", "body")
# When files could not be stored: when to send them again.
FILES_RETRY_AFTER_SECONDS = 60
FILES_FIELD = "files"


def _unread_refusal(unread: list[str]) -> _Refusal:
    return _Refusal(
        f"This endpoint does not read {fields.listed(unread)}; nothing was sent. Send client_msg_id and "
        f"body, and any files as {FILES_FIELD!r} in a multipart form."
    )


def _message_input(request: HttpRequest) -> tuple[str, str, list[attachments.IncomingFile] | None]:
    """(client_msg_id, body, files) from a JSON body, or from a form (multipart with ``files``).

    A form is read as the form its label says, never as JSON: the input check at the door
    (support.middleware) read it as a form, so a JSON body labelled one went unchecked."""
    if request.content_type in FORM_TYPES:
        unread = fields.form_unread(request, MESSAGE_FIELDS, files=[FILES_FIELD])
        if unread:
            raise _unread_refusal(unread)
        twice = fields.form_twice(request)
        if twice:
            raise _Refusal(f"{fields.twice_words(twice)}; nothing was sent. Send each field once.")
        client_msg_id, body = request.POST.get("client_msg_id"), request.POST.get("body", "")
        uploads = request.FILES.getlist("files")
        if not isinstance(client_msg_id, str):
            raise _Refusal("Send a client_msg_id with the message.")
        if len(uploads) > attachments.max_files():
            raise _Refusal(f"You can attach at most {attachments.max_files()} files to one message.")
        limit = attachments.max_bytes()
        for index, upload in enumerate(uploads):  # before reading any of them
            if upload.size is not None and upload.size > limit:
                name = attachments.clean_name(upload.name or "")
                words = f"{attachments.size_words(upload.size)}; a file can be at most {attachments.size_words(limit)}"
                raise _Refusal(f"{name} is {words}.", status=413, file_index=index)
        files = [attachments.IncomingFile(name=upload.name or "", data=upload.read()) for upload in uploads]
        return client_msg_id, body, files
    try:
        data = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise _Refusal("The request body must be JSON.") from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("body"), str)
        or not isinstance(data.get("client_msg_id"), str)
    ):
        raise _Refusal("Send a JSON object with a client_msg_id and a body.")
    unread = fields.unread(data, MESSAGE_FIELDS)
    if unread:
        raise _unread_refusal(unread)
    return data["client_msg_id"], data["body"], None


@require_POST
def message_create(request: HttpRequest, ticket_id: int) -> JsonResponse:
    """POST {client_msg_id, body} as JSON, or as a multipart form that may carry ``files``
    (attachments): 201 first time, 200 with the original on a retry, 400 (also for a field it does not
    read, such as a file sent as other than ``files``), 409 (a client message ID used for other words,
    or a closed ticket: ``"code": "ticket_closed"``), 413; a refusal of one of the files says which
    (``"file_index"``, from 0, in the order sent); 401 with a sign-in link back to the ticket
    when the session has ended; 404 (``"code": "not_this_account"``, with that link) for a ticket that
    is not the signed-in customer's."""
    if not request.user.is_authenticated:
        # Told before the ticket is looked up: whether it exists is nobody's business yet.
        return JsonResponse(
            {"error": "You were signed out, so this message was not sent.", "login_url": _login_url(ticket_id)},
            status=401,
        )
    try:
        ticket = selectors.ticket_get_for_customer(user=request.user, ticket_id=ticket_id)
    except Http404:
        # Said as for a missing ticket (whose it is stays unsaid), in the chat's words: most often another
        # customer signed in on this browser while the chat was open (a shared computer).
        return JsonResponse(
            {
                "error": "this conversation is not open to the account signed in on this browser now.",
                "code": "not_this_account",
                "login_url": _login_url(ticket_id),
            },
            status=404,
        )
    try:
        client_msg_id, body, files = _message_input(request)
        client_msg_id = services.client_key(client_msg_id)
    except _Refusal as refusal:
        return _refused(str(refusal), refusal.status, refusal.file_index)
    except ValidationError as exc:
        return JsonResponse({"error": exc.messages[0]}, status=400)
    retried = Message.objects.filter(ticket=ticket, client_msg_id=client_msg_id.strip()).exists()
    if not retried:  # a retried send returns the original and is not counted
        wait = over_limit(request, group="tickets.message", key="user", rate_setting="CUSTOMER_MESSAGE_RATE")
        if wait is not None:
            return too_many(wait, f"You are sending messages quickly; please wait {wait} s and send again.", json=True)
    try:
        message, created = services.message_post(
            ticket=ticket,
            author_kind=AuthorKind.CUSTOMER,
            author_user=request.user,
            body=body,
            client_msg_id=client_msg_id,
            files=files if files is not None else [],
            unseen_client_msg_id=not retried,
        )
    except services.MessageConflict as exc:
        return JsonResponse({"error": exc.messages[0]}, status=409)
    except services.FilesNotStored as exc:
        # Nothing was kept: the same send (same client message ID) is safe to try again.
        unavailable = JsonResponse({"error": exc.messages[0], "code": exc.code}, status=503)
        unavailable["Retry-After"] = str(FILES_RETRY_AFTER_SECONDS)
        return unavailable
    except attachments.AttachmentRefused as exc:
        return _refused(exc.messages[0], 413 if exc.code == "too_large" else 400, exc.position)
    except ValidationError as exc:
        # A closed ticket is no fault of the message: the ticket's state refuses it (409, as HTTP
        # says of a request that conflicts with the resource's state); a client can tell by the code.
        if exc.code == "ticket_closed":
            return JsonResponse({"error": exc.messages[0], "code": exc.code}, status=409)
        return JsonResponse({"error": exc.messages[0]}, status=400)
    # A message just written without files has none: no query to learn it.
    known = [] if created and not files else None
    return JsonResponse({"message": _message_json(message, stored=known)}, status=201 if created else 200)


@login_required
@require_GET
def attachment_file(request: HttpRequest, attachment_id: int) -> HttpResponse:
    """A file sent on a ticket, to its customer and to staff (404 for anyone else). Images are
    shown inline; anything else (PDFs) downloads. The response runs nothing: no sniffing, and a
    sandboxing policy of its own."""
    attachment = selectors.attachment_get_for_user(user=request.user, attachment_id=attachment_id)
    try:
        handle = default_storage.open(attachment.storage_name, "rb")
    except FileNotFoundError:
        raise Http404("No such file") from None
    except Exception as exc:  # noqa: BLE001 - any storage's error: a folder, a bucket, a network
        logger.error(
            "Attachments: the storage cannot open %s (%s: %s)", attachment.storage_name, type(exc).__name__, exc
        )
        unavailable = HttpResponse(
            "This file cannot be opened just now. Please try again in a minute.",
            status=503,
            content_type="text/plain; charset=utf-8",
        )
        unavailable["Retry-After"] = str(FILES_RETRY_AFTER_SECONDS)
        return unavailable
    response = FileResponse(
        handle,
        content_type=attachment.content_type,
        as_attachment=not attachment.content_type.startswith("image/"),
        filename=attachments.download_name(attachment.original_name, attachment.content_type),
    )
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; sandbox"
    response["Cross-Origin-Resource-Policy"] = "same-origin"
    response["Cache-Control"] = "private, max-age=3600"
    return response
