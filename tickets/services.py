"""Writes to the ledger. Every function is keyword-only and runs in a transaction."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import DatabaseError, IntegrityError, connection, models, transaction
from django.db.models import F, QuerySet
from django.db.models.functions import Least
from django.utils import timezone

from support import rows
from support.storable import shows_something
from tickets import realtime
from tickets.attachments import CheckedFile, IncomingFile, inspect_all
from tickets.models import (
    AGENT_STAYS_OUT,
    BIGINT_MAX,
    HANDLE_PERMISSION,
    RATING_COMMENT_MAX_CHARS,
    RATING_SCORES,
    TICKET_TRANSITIONS,
    ActorKind,
    Attachment,
    AuthorKind,
    Customer,
    Message,
    Ticket,
    TicketEvent,
    TicketPriority,
    TicketRating,
    TicketStatus,
    ticket_can_be_rated,
)
from tickets.signals import (
    ticket_event_appended,
    ticket_given_back,
    ticket_needs_agent,
    ticket_staff_wrote,
    ticket_taken_from_agent,
)

MESSAGE_MAX_CHARS: int = getattr(settings, "MESSAGE_MAX_CHARS", 4000)
SUBJECT_MAX_CHARS = 200
# The form's reference keys the ticket's first message as ``open:<ref>`` (a message key is at most 100).
CLIENT_REF_MAX_CHARS = 100 - len("open:")


logger = logging.getLogger(__name__)


class InvalidTransition(ValidationError):
    """A ticket status change that TICKET_TRANSITIONS does not allow."""


class MessageConflict(ValidationError):
    """A client message ID reused for a different message body."""


class FilesNotStored(ValidationError):
    """The storage refused a message's files (a full disk, a volume gone, a bucket down): nothing of
    the message was kept, and the same send may be tried again."""


def _ticket_id(ticket: Ticket | int) -> int:
    return ticket if isinstance(ticket, int) else int(ticket.pk)


# What the statement of a fenced transaction raises when the fence does not hold (tickets_fence_refused(),
# migration tickets 0005): the statement fails whole, so nothing of it stays even when it commits alone.
FENCE_REFUSED_SQLSTATE = "LF001"


class FenceRefused(Exception):
    """The fence given to ``events_batched`` touched no row: nothing of the transaction may commit."""


@dataclass
class Fence:
    """A condition a transaction must still meet when it commits, checked in the statement that
    numbers its timeline events: ``sql`` is an ``UPDATE ... RETURNING 1`` of one row (it takes that
    row's lock until commit), ``ticket_id`` the ticket whose events it guards."""

    ticket_id: int
    sql: str
    params: list[Any]
    # Once the transaction's events of ``ticket_id`` are numbered with the fence: the ticket's last
    # event number before them and after them (a gap before them is someone else's writes).
    numbered: tuple[int, int] | None = None


class _EventBatch(threading.local):
    """Timeline events appended inside ``events_batched()``, written together when it ends."""

    def __init__(self) -> None:
        self.depth = 0
        self.drafts: list[TicketEvent] = []


_batch = _EventBatch()


@contextlib.contextmanager
def events_batched(*, fence: Fence | None = None, whole_transaction: bool = False) -> Iterator[None]:
    """Write the timeline events appended inside this block together, when it ends.

    One statement numbers and inserts all of a ticket's events, instead of two
    statements per event. With a ``fence``, that statement also runs the fence
    and fails unless it holds (``FenceRefused``). Must be used inside a
    transaction; events of a block that raises are dropped with it. Nested
    blocks write once, when the outermost ends.

    ``whole_transaction``: the block is all of an outermost transaction that ends with it. When
    nothing of the transaction reached the server before that statement (every row was held), the
    statement is sent as the whole transaction: no BEGIN and no COMMIT round trip.
    """
    if not connection.in_atomic_block:
        raise transaction.TransactionManagementError("events_batched() needs a transaction")
    _batch.depth += 1
    try:
        yield
    except BaseException:
        if _batch.depth == 1:
            _batch.drafts = []
        raise
    finally:
        _batch.depth -= 1
    if _batch.depth == 0:
        drafts, _batch.drafts = _batch.drafts, []
        _write_events(drafts, fence=fence, whole_transaction=whole_transaction)


def _write_events(drafts: list[TicketEvent], *, fence: Fence | None = None, whole_transaction: bool = False) -> None:
    """Give each draft the next sequence number of its ticket, in order, and insert them, in one
    statement per ticket that also carries the rows held by ``support.rows`` and the fence.

    The counter lives on the ticket row and is bumped by a single UPDATE, which
    takes the row lock until commit: concurrent writers queue behind it, and a
    rolled-back transaction gives its numbers back, so numbers have no gaps.
    """
    per_ticket: dict[int, list[TicketEvent]] = {}
    for draft in drafts:
        per_ticket.setdefault(draft.ticket_id, []).append(draft)
    # A held change of a ticket row whose events this writes (its status) is written by the same
    # UPDATE that moves the ticket's counter on.
    changes = {ticket_id: rows.take_update(Ticket, ticket_id) for ticket_id in per_ticket}
    # A ticket this transaction opens (its held insert) is inserted by that statement, its counter
    # starting at its events' number: no UPDATE of a row the statement could not see yet.
    opened = {ticket_id: rows.take_insert(Ticket, ticket_id) for ticket_id in per_ticket}
    held = rows.take()
    if per_ticket and any(rows.updates(cte, Ticket) for cte in held):
        # A held change of a ticket row (its status) and the counter's UPDATE of that row cannot
        # share a statement: PostgreSQL would apply only one of them. The held rows go first.
        with connection.cursor() as cursor:
            cursor.execute(*rows.statement(held))
        held = []
    if fence is not None and fence.ticket_id not in per_ticket:
        head, params = rows.with_clause([*held, (fence.sql, fence.params)])
        condition, condition_params = rows.checks(held)
        with connection.cursor() as cursor:
            cursor.execute(
                f"{head[:-2]} SELECT EXISTS (SELECT 1 FROM held_{len(held)}) AND {condition}", params + condition_params
            )
            if not cursor.fetchone()[0]:
                raise FenceRefused()
        held = []
    alone = whole_transaction and len(per_ticket) == 1 and (fence is None or fence.ticket_id in per_ticket)
    for ticket_id, events in per_ticket.items():
        guard = fence if fence is not None and fence.ticket_id == ticket_id else None
        sql, params = _numbered_insert(ticket_id, events, guard, held, changes[ticket_id], opened[ticket_id])
        held = []
        try:
            with connection.cursor() as cursor, rows.whole_transaction(alone):
                cursor.execute(sql, params)
                fenced, last, keys, public, _ = cursor.fetchone()
        except DatabaseError as exc:
            if getattr(exc.__cause__, "sqlstate", None) == FENCE_REFUSED_SQLSTATE:
                raise FenceRefused() from None
            raise
        if guard is not None and not fenced:
            raise FenceRefused()
        if last is None:
            raise Ticket.DoesNotExist(f"ticket {ticket_id} does not exist")
        if guard is not None:
            guard.numbered = (last - len(events), last)
        for offset, (event, key, shown) in enumerate(zip(events, keys, public, strict=True)):
            event.seq, event.pk, event.is_public = last - len(events) + 1 + offset, key, shown
            event._state.adding, event._state.db = False, connection.alias
        _ring_after_commit(ticket_id)
    if held:  # no event and no fence: the held rows on their own
        with connection.cursor() as cursor:
            cursor.execute(*rows.statement(held))


# The ticket's last change (the inbox's order, by ``status, updated_at``), on the database's clock.
# The agent's own steps, a few milliseconds apart, move it on only once it is a second old: they then
# change no column an index of tickets holds, and PostgreSQL updates the row in place (HOT) instead
# of adding an entry to each of the table's indexes at every step. What a customer or a person does,
# and any change of the ticket's fields (its status), moves it to the instant.
_MOVED_ON_BY_THE_AGENT = (
    "CASE WHEN tickets_ticket.updated_at BETWEEN statement_timestamp() - interval '1 second' "
    "AND statement_timestamp() THEN tickets_ticket.updated_at ELSE statement_timestamp() END"
)
_EVENT_FIELDS = tuple(f.name for f in TicketEvent._meta.concrete_fields if f.name not in {"id", "seq"})
_HELD = sorted(AGENT_STAYS_OUT)


@functools.cache
def _event_columns() -> tuple[str, str]:
    """The events' columns, and the values inserted in them: each row's own, except that an event
    appended with ``is_public=None`` is public unless a person has the ticket (``AGENT_STAYS_OUT``) when
    the statement writes it (``seq.held``: read under the ticket row's lock the statement takes)."""
    quote = connection.ops.quote_name
    columns = [quote(TicketEvent._meta.get_field(name).column) for name in _EVENT_FIELDS]
    public = quote(TicketEvent._meta.get_field("is_public").column)
    values = [f"COALESCE(r.{c}, NOT seq.held)" if c == public else f"r.{c}" for c in columns]
    return ", ".join(columns), ", ".join(values)


def _numbered_insert(
    ticket_id: int,
    events: list[TicketEvent],
    fence: Fence | None,
    held: list[rows.SqlValue],
    change: tuple[tuple[str, ...], Ticket] | None = None,
    opened: Ticket | None = None,
) -> tuple[str, list[Any]]:
    """One statement: the held rows, (the fence,) the ticket's counter moved on by len(events) (with
    the ``change`` of its fields, if any), the events inserted with their numbers. Returns (fence
    held, last number, the events' keys in order, whether each is public). The events travel as one
    JSON parameter, so the statement's text does not depend on their number. ``opened``: the ticket is new, inserted by
    this statement with its counter at len(events) (the held rows may point at it)."""
    columns, values = _event_columns()
    head, params = rows.with_clause(held)
    checked, checked_params = rows.checks(held)
    condition = ""
    if fence is not None:
        head = (head or "WITH ") + f"fence AS ({fence.sql}), "
        params.extend(fence.params)
        condition = " AND EXISTS (SELECT 1 FROM fence)"
    # The last change on the database's clock: the inbox orders tickets by it, whichever host wrote.
    if opened is not None:
        opened.last_event_seq = len(events)
        insert, insert_params = rows.insert_sql([opened], computed={"updated_at": ("statement_timestamp()", [])})
        counter = f"{insert} RETURNING tickets_ticket.last_event_seq, tickets_ticket.status = ANY(%s) AS held"
        params.extend([*insert_params, _HELD])
    else:
        params.append(len(events))
        changed, source = "", ""
        if change is not None:
            names, ticket = change
            quote = connection.ops.quote_name
            changed = "".join(f", {c} = m.{c}" for c in (quote(Ticket._meta.get_field(n).column) for n in names))
            source = " FROM jsonb_populate_record(NULL::tickets_ticket, (%s::jsonb) -> 0) m"
            params.append(rows.json_rows([ticket], names))
        params.extend([ticket_id, _HELD])
        agents_own = change is None and all(event.actor_kind == ActorKind.AGENT for event in events)
        moved_on = _MOVED_ON_BY_THE_AGENT if agents_own else "statement_timestamp()"
        counter = (
            "UPDATE tickets_ticket SET last_event_seq = tickets_ticket.last_event_seq + %s, "
            f"updated_at = {moved_on}{changed}{source} WHERE tickets_ticket.id = %s{condition} "
            "RETURNING tickets_ticket.last_event_seq, tickets_ticket.status = ANY(%s) AS held"
        )
    params.extend([len(events), rows.json_rows(events, _EVENT_FIELDS), *checked_params])
    sql = (
        f"{head or 'WITH '}seq AS ({counter}), "
        f"new AS (INSERT INTO tickets_ticketevent (seq, {columns}) "
        f"SELECT seq.last_event_seq - %s + e.n, {values} "
        "FROM seq, jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS e(doc, n), "
        "LATERAL jsonb_populate_record(NULL::tickets_ticketevent, e.doc) AS r RETURNING id, seq, is_public) "
        f"SELECT {'(EXISTS (SELECT 1 FROM fence) OR tickets_fence_refused())' if fence is not None else 'TRUE'}, "
        "(SELECT last_event_seq FROM seq), (SELECT array_agg(id ORDER BY seq) FROM new), "
        f"(SELECT array_agg(is_public ORDER BY seq) FROM new), {checked}"
    )
    return sql, params


class _Doorbell:
    """After commit, tell a ticket's watchers that its timeline moved: once per transaction."""

    def __init__(self, ticket_id: int) -> None:
        self.ticket_id = ticket_id

    def __call__(self) -> None:
        ticket_event_appended.send(sender=TicketEvent, ticket_id=self.ticket_id)


def _ring_after_commit(ticket_id: int) -> None:
    pending = getattr(connection, "run_on_commit", None) or []
    # Django keeps (savepoint ids, callback, robust) per registered callback; one doorbell per
    # ticket per transaction is enough (the watchers read whatever is new in the ledger).
    if any(isinstance(entry[1], _Doorbell) and entry[1].ticket_id == ticket_id for entry in pending):
        return
    transaction.on_commit(_Doorbell(ticket_id))


def event_append(
    *,
    ticket: Ticket | int,
    kind: str,
    actor_kind: str,
    actor_user: AbstractBaseUser | None = None,
    actor_ref: str = "",
    payload: dict[str, Any] | None = None,
    is_public: bool | None = False,
) -> TicketEvent:
    """Append one event to a ticket's timeline with the next sequence number.

    ``is_public=None``: public unless a person has the ticket (with a person, resolved or closed) when
    the event is written, decided in the statement that writes it, under the ticket row's lock (what the
    agent sets out to do, written while a person took the ticket over, is not told to the customer).

    Inside ``events_batched()`` the event is written when the block ends (its
    ``seq`` and ``pk`` are set then); otherwise at once.
    """
    event = rows.new(
        TicketEvent,
        ticket_id=_ticket_id(ticket),
        kind=kind,
        actor_kind=actor_kind,
        actor_user=actor_user,
        actor_ref=actor_ref,
        payload=payload or {},
        is_public=is_public,
        created_at=timezone.now(),
    )
    if _batch.depth:
        _batch.drafts.append(event)
        return event
    # No savepoint: a failure here fails the caller's whole transaction anyway.
    with transaction.atomic(savepoint=False):
        _write_events([event])
    return event


def _storable_or_refuse(text: str, what: str) -> None:
    """PostgreSQL stores neither NUL characters nor lone surrogates: refuse them, before any write."""
    if "\x00" in text:
        raise ValidationError(f"{what} contains a NUL character; please remove it.", code="nul")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(f"{what} contains characters that are not valid Unicode.", code="bad_unicode") from None


def one_line_break(text: str) -> str:
    """Line breaks as one character each: a form posts the box's breaks as CRLF (two), which
    the box itself counted as one; a message the box took whole is not refused for them."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _clean_body(body: str) -> str:
    text = one_line_break(body or "").strip()
    if not shows_something(text):
        raise ValidationError("A message cannot be empty.", code="empty")
    _storable_or_refuse(text, "The message")
    if len(text) > MESSAGE_MAX_CHARS:
        raise ValidationError(
            f"A message can be at most {MESSAGE_MAX_CHARS} characters; this one has {len(text)}.",
            code="too_long",
        )
    return text


def message_post(
    *,
    ticket: Ticket | int,
    author_kind: str,
    body: str,
    author_user: AbstractBaseUser | None = None,
    is_public: bool = True,
    client_msg_id: str | None = None,
    actor_ref: str = "",
    stream: int | None = None,
    first_time: bool = False,
    key: int | None = None,
    files: list[IncomingFile] | None = None,
    unseen_client_msg_id: bool = False,
    opening: bool = False,
) -> tuple[Message, bool]:
    """Post a message on a ticket; returns (message, created).

    ``files``: attachments (``tickets.attachments.inspect`` decides what is accepted, and every
    file is checked before anything is written). With files the body may be empty: the
    message then reads as the files' names (a message always has text, for every reader).

    ``stream``: the agent's answer was streamed to watchers under this id first; its event says so,
    so a watcher that has (or is about to get) that stream's text shows the message instead.
    ``first_time``: the caller knows this message cannot exist yet (it is keyed by a row written in
    the same transaction); it is written without looking for an earlier copy (not for customers),
    with ``key`` as its primary key if the caller took one from the sequence already.

    With a ``client_msg_id`` the call is idempotent: a repeat returns the
    original message and ``created=False``, and starts nothing new (no second set of files).
    Reusing the ID for a different body or different files is refused with MessageConflict.
    ``unseen_client_msg_id``: the caller has just looked for a message with this ID on the ticket
    and found none, so it is not looked for again; a concurrent request that wins the insert is
    still caught by the unique constraint, and its message returned.
    ``opening``: the customer's first message of a ticket the caller's transaction opens (``ticket_open``,
    inside ``support.rows.write_behind``): written as ``first_time``, with no ticket to reopen.
    """
    checked = inspect_all(files or [])
    if checked and not shows_something(body or ""):
        body = ", ".join(f.name for f in checked)[:MESSAGE_MAX_CHARS]
    text = _clean_body(body)
    ticket_id = _ticket_id(ticket)
    author = (author_kind, author_user.pk if author_user is not None else None)
    if opening and client_msg_id is not None:
        client_msg_id = _client_msg_id_checked(client_msg_id)
    if opening or (first_time and author_kind != AuthorKind.CUSTOMER):
        message = Message(
            pk=key, ticket_id=ticket_id, author_kind=author_kind, author_user=author_user, body=text,
            is_public=is_public, client_msg_id=client_msg_id,
        )  # fmt: skip
        rows.insert([message])
        _message_event(message, actor_ref, stream)
        if opening:
            # Sent as from the ticket: no approval request can wait on a ticket opened just now, so the
            # dashboards (told of a customer's message on a ticket with one) are not asked.
            transaction.on_commit(lambda: ticket_needs_agent.send(sender=Ticket, ticket_id=ticket_id))
        return message, True
    if client_msg_id is not None:
        client_msg_id = _client_msg_id_checked(client_msg_id)
        existing = None
        if not unseen_client_msg_id:
            existing = Message.objects.filter(ticket_id=ticket_id, client_msg_id=client_msg_id).first()
        if existing is not None:
            return _same_message(existing, text, checked if files is not None else None, author=author), False
    stored: list[str] = []
    try:
        # The bytes first, outside the transaction: a slow upload to remote storage holds no lock.
        _store_files(ticket_id, checked, stored)
        with transaction.atomic():
            message = Message.objects.create(
                ticket_id=ticket_id,
                author_kind=author_kind,
                author_user=author_user,
                body=text,
                is_public=is_public,
                client_msg_id=client_msg_id,
            )
            attachments = _attachment_rows(message, checked, stored)
            _message_event(message, actor_ref, stream, attachments=attachments)
            if author_kind == AuthorKind.CUSTOMER:
                _reopen_for_customer(ticket_id, author_user)
                transaction.on_commit(lambda: ticket_needs_agent.send(sender=Message, ticket_id=ticket_id))
    except BaseException as exc:
        _forget_files(stored)  # the rows that named them were rolled back
        # A concurrent request with the same client message ID won the insert.
        if not isinstance(exc, IntegrityError) or client_msg_id is None:
            raise
        existing = Message.objects.filter(ticket_id=ticket_id, client_msg_id=client_msg_id).first()
        if existing is None:
            raise
        return _same_message(existing, text, checked if files is not None else None, author=author), False
    return message, True


def _client_msg_id_checked(client_msg_id: str) -> str:
    client_msg_id = client_msg_id.strip()
    if not client_msg_id or len(client_msg_id) > 100:
        raise ValidationError("A client message ID must be 1 to 100 characters.", code="bad_client_msg_id")
    return client_msg_id


def _store_files(ticket_id: int, checked: list[CheckedFile], stored: list[str]) -> None:
    """Put the files' bytes in storage, each under a random name in the ticket's folder (the
    customer's name for a file is only ever data). Each name is added to ``stored`` as soon as
    it exists, so the caller can remove the files if what names them is not committed.
    Raises FilesNotStored when the storage refuses one (the reason is logged for operators)."""
    for file in checked:
        path = f"attachments/{ticket_id}/{uuid.uuid4().hex}{file.extension}"
        try:
            stored.append(default_storage.save(path, ContentFile(file.data)))
        except Exception as exc:  # noqa: BLE001 - any storage's error: a folder, a bucket, a network
            logger.error(
                "Attachments: the storage refused %s of ticket %s (%s: %s); check MEDIA_ROOT or MEDIA_STORAGE_*",
                path, ticket_id, type(exc).__name__, exc,
            )  # fmt: skip
            raise FilesNotStored(
                "Your files could not be stored just now, so this message was not sent. "
                "Please send it again in a minute.",
                code="files_not_stored",
            ) from exc


def _attachment_rows(message: Message, checked: list[CheckedFile], stored: list[str]) -> list[Attachment]:
    """The rows of the files ``_store_files`` stored (in the same order), in the caller's transaction."""
    attachments = [
        Attachment(
            message=message,
            original_name=file.name,
            content_type=file.content_type,
            size=len(file.data),
            sha256=file.sha256,
            storage_name=name,
            position=position,
        )
        for position, (file, name) in enumerate(zip(checked, stored, strict=True))
    ]
    return Attachment.objects.bulk_create(attachments) if attachments else []


def _forget_files(names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(Exception):  # a file left behind costs disk, never correctness
            default_storage.delete(name)


def _message_event(
    message: Message,
    actor_ref: str,
    stream: int | None,
    *,
    author_name: str = "",
    attachments: list[Attachment] | None = None,
    seen_seq: int | None = None,
) -> None:
    event_append(
        ticket=message.ticket_id,
        kind="message",
        actor_kind=message.author_kind,
        actor_user=message.author_user,
        actor_ref=actor_ref,
        payload={
            "message_id": message.pk,
            "author_kind": message.author_kind,
            "body": message.body,
            # Lets the sender's chat match the event to the bubble it already shows.
            "client_msg_id": message.client_msg_id,
            **({"stream": stream} if stream is not None else {}),
            # A person's name as the customer sees it, fixed when they wrote.
            **({"author_name": author_name} if author_name else {}),
            # What was attached, as readers list it (the bytes are fetched by id, access checked).
            **({"attachments": [_attachment_entry(a) for a in attachments]} if attachments else {}),
            # A person's reply answers the customer's messages up to this event of the timeline (the
            # last their page showed), not those after it (``agents.services._unanswered_again``).
            **({"seen_seq": seen_seq} if seen_seq is not None else {}),
        },
        is_public=message.is_public,
    )


def _attachment_entry(attachment: Attachment) -> dict[str, Any]:
    return {
        "id": attachment.pk,
        "name": attachment.original_name,
        "type": attachment.content_type,
        "size": attachment.size,
    }


def _same_message(
    existing: Message, text: str, checked: list[CheckedFile] | None = None, *, author: tuple[str, Any]
) -> Message:
    """The original of a retried send, if the retry is the same message from the same author
    (``author``: kind and user id): the same text and, for a sender who can attach (``checked``
    given), the same files (by the hash of what was stored). A message of someone else under the
    same ID is never handed back as the sender's own."""
    same_files = checked is None or [f.sha256 for f in checked] == list(
        existing.attachments.order_by("position").values_list("sha256", flat=True)
    )
    if (existing.author_kind, existing.author_user_id) != author:
        raise MessageConflict(
            "This client message ID was already used on this ticket by someone else.", code="client_msg_id_conflict"
        )
    if existing.body != text or not same_files:
        raise MessageConflict(
            "This client message ID was already used for a different message.", code="client_msg_id_conflict"
        )
    return existing


def _reopen_for_customer(ticket_id: int, user: AbstractBaseUser | None) -> None:
    ticket = Ticket.objects.select_for_update().get(pk=ticket_id)
    if ticket.status in {TicketStatus.WAITING_ON_CUSTOMER, TicketStatus.RESOLVED}:
        ticket_transition(ticket=ticket, to_status=TicketStatus.OPEN, actor_kind=ActorKind.CUSTOMER, actor_user=user)
    elif ticket.status == TicketStatus.CLOSED:
        raise ValidationError("This ticket is closed; please open a new one.", code="ticket_closed")


def reference_for_other_words(existing: Ticket, *, subject: str, body: str) -> str | None:
    """A new-ticket form sent again under the reference ``existing`` was opened with: None when it
    says the same (a retried send: that ticket), else the reference its own ticket is opened under
    (the form was reused, by the browser's Back button, for another request), derived from its words
    so that a retry of it finds that ticket in turn."""
    try:
        text = _clean_body(body)
    except ValidationError:
        text = str(body)  # words it cannot take: not the same words (opening with them is refused, with why)
    subject = (subject or "").strip() or text[:80]
    first = Message.objects.filter(ticket=existing, client_msg_id=f"open:{existing.client_ref}").first()
    if first is not None and first.body == text and existing.subject == subject:
        return None
    digest = hashlib.sha256(f"{subject}\n{text}".encode()).hexdigest()[:16]
    return f"{existing.client_ref}:{digest}"[-CLIENT_REF_MAX_CHARS:]


def ticket_open(
    *,
    customer: Customer,
    subject: str,
    body: str,
    client_ref: str | None = None,
    unseen_client_ref: bool = False,
) -> tuple[Ticket, bool]:
    """Open a ticket with the customer's first message; returns (ticket, created).

    A repeat with the same ``client_ref`` returns the ticket the first call opened.
    ``unseen_client_ref``: the caller has just looked for the customer's ticket with this reference
    and found none, so it is not looked for again; a concurrent request that wins the insert is
    still caught by the unique constraint, and its ticket returned.
    """
    subject = (subject or "").strip()
    if not subject:
        subject = _clean_body(body)[:80]
    _subject_checked(subject)
    if client_ref is not None:
        _storable_or_refuse(client_ref, "The form")
    if client_ref is not None and not unseen_client_ref:
        existing = Ticket.objects.filter(customer=customer, client_ref=client_ref).first()
        if existing is not None:
            other = reference_for_other_words(existing, subject=subject, body=body)
            if other is None:
                return existing, False
            return ticket_open(customer=customer, subject=subject, body=body, client_ref=other)
    _clean_body(body)  # refused before any key is taken
    # The ticket, its first message and their events are one statement; their keys are taken
    # before it (outside any transaction of ours, with no BEGIN), and when nothing of a caller's
    # transaction comes before it, it is the whole transaction (no BEGIN, no COMMIT).
    outermost = not connection.in_atomic_block
    ticket_key, message_key = rows.new_keys(Ticket, Message)
    try:
        with (
            transaction.atomic(),
            rows.write_behind(),
            events_batched(whole_transaction=outermost),
        ):
            ticket = rows.new(Ticket, id=ticket_key, customer=customer, subject=subject, client_ref=client_ref)
            rows.insert([ticket])
            event_append(
                ticket=ticket,
                kind="ticket_opened",
                actor_kind=ActorKind.CUSTOMER,
                actor_user=customer.user,
                payload={"subject": subject},
                is_public=True,
            )
            message_post(
                ticket=ticket,
                author_kind=AuthorKind.CUSTOMER,
                author_user=customer.user,
                body=body,
                client_msg_id=f"open:{client_ref}" if client_ref else None,
                key=message_key,
                opening=True,  # the ticket is this transaction's: no message is on it yet
            )
    except IntegrityError:
        if client_ref is None:
            raise
        # A send of the same form won the insert: the same words, its ticket; other words, their own.
        existing = Ticket.objects.get(customer=customer, client_ref=client_ref)
        other = reference_for_other_words(existing, subject=subject, body=body)
        if other is None:
            return existing, False
        return ticket_open(customer=customer, subject=subject, body=body, client_ref=other)
    return ticket, True


def ticket_transition(
    *,
    ticket: Ticket | int,
    to_status: str,
    actor_kind: str,
    actor_user: AbstractBaseUser | None = None,
    actor_ref: str = "",
    reason: str = "",
) -> Ticket:
    """Move a ticket to ``to_status`` if TICKET_TRANSITIONS allows it.

    Moving to the status it already has is a no-op. Anything else not listed is
    refused with InvalidTransition, naming the allowed targets.
    """
    with transaction.atomic():
        locked = Ticket.objects.select_for_update().get(pk=_ticket_id(ticket))
        ticket_transition_locked(
            ticket=locked, to_status=to_status, actor_kind=actor_kind, actor_user=actor_user,
            actor_ref=actor_ref, reason=reason,
        )  # fmt: skip
    if isinstance(ticket, Ticket):
        ticket.status = locked.status
        ticket.resolved_at = locked.resolved_at
    return locked


def ticket_transition_locked(
    *,
    ticket: Ticket,
    to_status: str,
    actor_kind: str,
    actor_user: AbstractBaseUser | None = None,
    actor_ref: str = "",
    reason: str = "",
) -> Ticket:
    """``ticket_transition`` for a ticket row the caller locked (``select_for_update``) in the
    current transaction and read after locking. The rules are the same; the write is held
    (``support.rows``) to go out with the transaction's next statement."""
    from_status = ticket.status
    if from_status == to_status:
        return ticket
    if to_status not in TicketStatus.values:
        raise InvalidTransition(f"{to_status!r} is not a ticket status.", code="unknown_status")
    allowed = TICKET_TRANSITIONS[from_status]
    if to_status not in allowed:
        names = ", ".join(sorted(allowed)) or "none (final)"
        raise InvalidTransition(
            f"Ticket #{ticket.pk} cannot go from {from_status} to {to_status}; allowed: {names}.",
            code="invalid_transition",
        )
    ticket.status = to_status
    fields = ["status"]
    if to_status == TicketStatus.RESOLVED:
        ticket.resolved_at = timezone.now()
        fields.append("resolved_at")
    rows.update([ticket], fields)
    event_append(
        ticket=ticket,
        kind="status_changed",
        actor_kind=actor_kind,
        actor_user=actor_user,
        actor_ref=actor_ref,
        payload={"from": from_status, "to": to_status, "reason": reason},
        is_public=True,
    )
    ticket_id = ticket.pk
    if to_status in AGENT_STAYS_OUT and from_status not in AGENT_STAYS_OUT:
        # No more of the agent's words stream to the customer: an answer in flight is not posted.
        transaction.on_commit(lambda: realtime.stream_close(ticket_id))
        if actor_kind != ActorKind.AGENT:
            # A person (or the system) took the ticket from the agent: the agent ends whatever it left
            # waiting on it (an approval, a confirmation) now, not when a decision comes.
            transaction.on_commit(lambda: ticket_needs_agent.send(sender=Ticket, ticket_id=ticket_id))
            transaction.on_commit(lambda: ticket_taken_from_agent.send(sender=Ticket, ticket_id=ticket_id))
    elif from_status in AGENT_STAYS_OUT and to_status not in AGENT_STAYS_OUT:
        ticket_given_back.send(sender=Ticket, ticket_id=ticket_id)
        transaction.on_commit(lambda: realtime.stream_open(ticket_id))
    return ticket


def ticket_hand_to_person(
    *,
    ticket: Ticket | int,
    reason: str,
    actor_ref: str = "",
    actor_kind: str = ActorKind.SYSTEM,
    actor_user: AbstractBaseUser | None = None,
) -> bool:
    """Give the ticket to a person (status ``with_human``) from any open status; False if it is closed or
    a person has it already. A resolved ticket is reopened on the way."""
    actor = {"actor_kind": actor_kind, "actor_ref": actor_ref, "actor_user": actor_user}
    with transaction.atomic():
        locked = Ticket.objects.select_for_update().get(pk=_ticket_id(ticket))
        if locked.status in {TicketStatus.WITH_HUMAN, TicketStatus.CLOSED}:
            return False
        if TicketStatus.WITH_HUMAN not in TICKET_TRANSITIONS[locked.status]:
            locked = ticket_transition(ticket=locked, to_status=TicketStatus.OPEN, **actor)
        ticket_transition(ticket=locked, to_status=TicketStatus.WITH_HUMAN, reason=reason, **actor)
    return True


# --- What a person does on a ticket (the staff inbox, the admin) ---------------------------------


def staff_name(user: AbstractBaseUser | None) -> str:
    """How a member of staff is named to colleagues: their full name, else their first name, else the username."""
    return signature(user) if user is None else (_full_name(user) or user.get_username())


def signature(user: AbstractBaseUser | None) -> str:
    """How a member of staff signs what customers read: their full name, else their first name, else
    "Support team"; never the username, which is how they sign in."""
    return (_full_name(user) if user is not None else "") or "Support team"


def _full_name(user: AbstractBaseUser) -> str:
    return (getattr(user, "get_full_name", lambda: "")() or "").strip()


def _locked(ticket: Ticket | int) -> Ticket:
    return Ticket.objects.select_for_update().get(pk=_ticket_id(ticket))


def ticket_hold(ticket_id: int) -> str:
    """Hold the ticket's row until the caller's transaction ends, and return its status: a decision
    that depends on who has the ticket (the agent or a person) reads it after any take-over, resolve
    or close in flight has committed, and none can land between the reading and the decision's commit."""
    return Ticket.objects.select_for_update(no_key=True).values_list("status", flat=True).get(pk=ticket_id)


def _set_assignee(ticket: Ticket, assignee: AbstractBaseUser | None, actor_user: AbstractBaseUser | None) -> None:
    """Assign a ticket the caller locked; no event when nothing changes (a double click)."""
    if ticket.assignee_id == (assignee.pk if assignee is not None else None):
        return
    ticket.assignee = assignee
    rows.update([ticket], ["assignee"])
    event_append(
        ticket=ticket,
        kind="assigned",
        actor_kind=ActorKind.STAFF if actor_user else ActorKind.SYSTEM,
        actor_user=actor_user,
        payload={"assignee": assignee.get_username() if assignee is not None else None},
    )


def _not_closed(ticket: Ticket) -> None:
    """Refuse any change to a closed ticket (locked by the caller): it is final."""
    if ticket.status == TicketStatus.CLOSED:
        raise InvalidTransition(f"Ticket #{ticket.pk} is closed; nothing more can happen on it.", code="closed")


def _with_person_locked(ticket: Ticket, user: AbstractBaseUser) -> None:
    """The ticket (locked by the caller) goes to ``user``: status with_human, assigned to them.
    A resolved ticket is reopened on the way; a closed one is refused."""
    _not_closed(ticket)
    if ticket.status != TicketStatus.WITH_HUMAN and TicketStatus.WITH_HUMAN not in TICKET_TRANSITIONS[ticket.status]:
        ticket_transition_locked(
            ticket=ticket, to_status=TicketStatus.OPEN, actor_kind=ActorKind.STAFF, actor_user=user
        )
    ticket_transition_locked(
        ticket=ticket, to_status=TicketStatus.WITH_HUMAN, actor_kind=ActorKind.STAFF, actor_user=user,
        reason="taken over",
    )  # fmt: skip
    _set_assignee(ticket, user, user)


def ticket_take_over(
    *, ticket: Ticket | int, user: AbstractBaseUser, holder_seen: int | None | object = ..., seen_seq: int | None = None
) -> Ticket:
    """A person takes the ticket: the agent stays out (a run in flight ends without replying)
    until someone hands it back. Taking over one's own ticket again changes nothing. A ticket a
    colleague has is refused, unless the page it was asked from named them (``holder_seen``: the
    admin's button, on a page that says who has it): taking it from them is then what was asked.
    ``seen_seq``: the last timeline event the page showed; a ticket someone else resolved or
    assigned since is refused (taking it over would reopen it, or take it from its assignee)."""
    with transaction.atomic():
        locked = _locked(ticket)
        if holder_seen is ...:
            _not_a_colleagues(locked, user)
        else:
            _colleague_took_it_since(locked, user, holder_seen, _NOTHING_CHANGED)  # type: ignore[arg-type]
        if seen_seq is not None:
            _resolved_or_assigned_since(locked, seen_seq, user)
        _with_person_locked(locked, user)
    return locked


def ticket_hand_back(
    *,
    ticket: Ticket | int,
    user: AbstractBaseUser,
    holder_seen: int | None | object = ...,
    spare_colleagues: bool = False,
    seen_seq: int | None = None,
) -> Ticket:
    """The person gives the ticket back to the agent, which then answers what is unanswered.
    A ticket the agent already has is left as it is (a double click); resolved and closed
    tickets are refused (reopen by replying instead). ``holder_seen``: who had the ticket on the
    page it was asked from; a colleague who took it since is not overridden. ``spare_colleagues``:
    asked where no page names who has each ticket (the admin's bulk action), a ticket a colleague
    has is refused, as a bulk take-over is. ``seen_seq``: the last timeline event the page (or the
    list) showed of the ticket; one given to a person since by someone else (the agent handed it off: the customer
    asked for a person) is refused: the agent does not hand off twice what it handed off once, and
    handed back unseen, the customer who asked for a person would have nobody."""
    with transaction.atomic():
        locked = _locked(ticket)
        if locked.status in {TicketStatus.OPEN, TicketStatus.WAITING_ON_CUSTOMER, TicketStatus.PENDING_APPROVAL}:
            # Handed back already (someone else, or this same click sent twice): nothing changes, and
            # the person is told so, not "handed back" as if they had just done it.
            locked.nothing_changed = _already_handed_back(locked, user)
            return locked
        if spare_colleagues:
            _not_a_colleagues(locked, user)
        if holder_seen is not ...:
            _colleague_took_it_since(locked, user, holder_seen, _NOTHING_CHANGED)  # type: ignore[arg-type]
            _given_to_nobody_since(locked, holder_seen)  # type: ignore[arg-type]
        if seen_seq is not None and _given_to_a_person_after(locked, seen_seq, user):
            raise InvalidTransition(
                f"Ticket #{locked.pk} was handed to a person since this page was read (the agent stopped and says "
                "why on its timeline); nothing was changed. Read why, then hand it back again.",
                code="invalid_transition",
            )
        if locked.status != TicketStatus.WITH_HUMAN:
            raise InvalidTransition(
                f"Ticket #{locked.pk} is {locked.get_status_display().lower()}; only a ticket with a person can be "
                "handed back to the agent.",
                code="not_with_person",
            )
        ticket_transition_locked(
            ticket=locked, to_status=TicketStatus.OPEN, actor_kind=ActorKind.STAFF, actor_user=user,
            reason="handed back to the agent",
        )  # fmt: skip
        _set_assignee(locked, None, user)
        ticket_id = locked.pk
        transaction.on_commit(lambda: ticket_needs_agent.send(sender=Ticket, ticket_id=ticket_id))
    return locked


def _already_handed_back(ticket: Ticket, user: AbstractBaseUser) -> str:
    """What a hand-back of a ticket the agent has already says: who handed it back, if someone did."""
    last = (
        TicketEvent.objects.filter(ticket=ticket, kind="status_changed", payload__to=TicketStatus.OPEN)
        .filter(payload__reason="handed back to the agent")
        .select_related("actor_user")
        .order_by("-seq")
        .first()
    )
    if last is None:
        return f"Ticket #{ticket.pk} is with the agent already; nothing was changed."
    by = "you" if last.actor_user_id == user.pk else (last.actor_user.get_username() if last.actor_user else "someone")
    return f"Ticket #{ticket.pk} was already handed back to the agent by {by}; nothing was changed."


def _already_finished(ticket: Ticket, user: AbstractBaseUser) -> str:
    """What a resolve or close of a ticket already resolved or closed says: who did it, if a person did."""
    last = (
        TicketEvent.objects.filter(ticket=ticket, kind="status_changed", payload__to=ticket.status)
        .select_related("actor_user")
        .order_by("-seq")
        .first()
    )
    status = ticket.get_status_display().lower()
    if last is None or last.actor_user is None:
        return f"Ticket #{ticket.pk} was already {status}; nothing was changed."
    by = "you" if last.actor_user_id == user.pk else last.actor_user.get_username()
    return f"Ticket #{ticket.pk} was already {status} by {by}; nothing was changed."


def nothing_changed(ticket: Ticket) -> str:
    """What a service that changed nothing on ``ticket`` (as it returned it) says about it; empty when it did."""
    return getattr(ticket, "nothing_changed", "")


def ticket_resolve(
    *,
    ticket: Ticket | int,
    user: AbstractBaseUser,
    seen_seq: int | None = None,
    holder_seen: int | None | object = ...,
    spare_colleagues: bool = False,
) -> Ticket:
    return _finish(ticket, user, TicketStatus.RESOLVED, seen_seq, holder_seen, spare_colleagues)


def ticket_close(
    *,
    ticket: Ticket | int,
    user: AbstractBaseUser,
    seen_seq: int | None = None,
    holder_seen: int | None | object = ...,
    spare_colleagues: bool = False,
) -> Ticket:
    return _finish(ticket, user, TicketStatus.CLOSED, seen_seq, holder_seen, spare_colleagues)


def _customer_messages_after(ticket: Ticket | int, seq: int) -> QuerySet[TicketEvent, Any]:
    """The IDs of the customer's messages whose timeline events come after event ``seq``: what a
    page that showed events up to ``seq`` never showed."""
    return TicketEvent.objects.filter(
        ticket=ticket, seq__gt=seq, kind="message", actor_kind=ActorKind.CUSTOMER
    ).values_list("payload__message_id", flat=True)


def customer_wrote_since(*, ticket: Ticket | int, seq: int) -> bool:
    """Whether the customer wrote after timeline event ``seq`` (what a page that showed up to it missed)."""
    return _customer_messages_after(_ticket_id(ticket), seq).exists()


def _finish(
    ticket: Ticket | int,
    user: AbstractBaseUser,
    to_status: str,
    seen_seq: int | None,
    holder_seen: int | None | object,
    spare_colleagues: bool,
) -> Ticket:
    """Resolve or close. With ``seen_seq`` (the last timeline event the page showed), refused when the
    customer wrote since: a message the person never saw would be left unanswered on a ticket nobody
    watches. With ``holder_seen`` (who had the ticket by the page), refused when a colleague took it
    since: it would end their live conversation. Pressed again from the page that shows it, it is done.
    ``spare_colleagues``: as for ``ticket_hand_back``."""
    with transaction.atomic():
        locked = _locked(ticket)
        if locked.status == to_status:
            # Finished already (by a colleague, or this same click sent twice): nothing changes, and the
            # person is told so, not "closed" as if they had just done it.
            locked.nothing_changed = _already_finished(locked, user)
            return locked
        if spare_colleagues:
            _not_a_colleagues(locked, user)
        if holder_seen is not ...:
            _colleague_took_it_since(locked, user, holder_seen, _NOTHING_CHANGED)  # type: ignore[arg-type]
            _given_to_nobody_since(locked, holder_seen)  # type: ignore[arg-type]
        if seen_seq is not None and _customer_messages_after(locked, seen_seq).exists():
            raise InvalidTransition(
                f"The customer wrote on ticket #{locked.pk} since this page was opened; nothing was changed. "
                "Read the new message, then press the button again.",
                code="invalid_transition",
            )
        if (
            seen_seq is not None
            and locked.status == TicketStatus.PENDING_APPROVAL
            and TicketEvent.objects.filter(
                ticket=locked, seq__gt=seen_seq, kind="status_changed", payload__to=TicketStatus.PENDING_APPROVAL
            ).exists()
        ):
            # The customer was just told their request is under review: it would end unreviewed.
            raise InvalidTransition(
                f"The agent asked staff to approve a request on ticket #{locked.pk} since this page was opened; "
                "nothing was changed. Read it, then press the button again.",
                code="invalid_transition",
            )
        return ticket_transition_locked(ticket=locked, to_status=to_status, actor_kind=ActorKind.STAFF, actor_user=user)


def ticket_assign_to(
    *,
    ticket: Ticket | int,
    assignee: AbstractBaseUser | None,
    user: AbstractBaseUser,
    holder_seen: int | None | object = ...,
    assignee_seen: int | None | object = ...,
) -> Ticket:
    """Assign (or unassign, with None) without changing who answers: the status stays. With
    ``holder_seen`` (who had the ticket by the page the choice was made on), an assignment made on a
    page read before a colleague took the ticket is refused, not a silent re-assignment. With
    ``assignee_seen`` (whom that page showed assigned; None: nobody), so is one made on a page read
    before someone else assigned it (while the agent still answers it). Asked again from the page
    that shows them, it is done. A closed ticket is refused: assigned, it would sit with someone whose
    "Mine" never lists it, the person assigning it told it was handed on."""
    with transaction.atomic():
        locked = _locked(ticket)
        _not_closed(locked)
        if holder_seen is not ...:
            _colleague_took_it_since(
                locked, user, holder_seen,  # type: ignore[arg-type]
                refused="nothing was changed. Assign it again from this page to take it from them.",
            )  # fmt: skip
        wanted = assignee.pk if assignee is not None else None
        if assignee_seen is not ... and locked.assignee_id not in {assignee_seen, wanted}:
            now = locked.assignee.get_username() if locked.assignee is not None else "nobody"
            raise InvalidTransition(
                f"Ticket #{locked.pk} was assigned to {now} since this page was opened; nothing was changed. "
                "Assign it again from this page to change that.",
                code="invalid_transition",
            )
        _set_assignee(locked, assignee, user)
    return locked


# What a member of staff may edit on a ticket's page. The customer is not among them: the
# conversation (and the orders the agent may refund) belong to the customer who opened it.
TICKET_EDITABLE_FIELDS = ("subject", "priority", "assignee")


def ticket_edit(*, ticket: Ticket | int, user: AbstractBaseUser, changes: dict[str, Any]) -> Ticket:
    """A member of staff edits the ticket's subject, priority or assignee. Only the fields given are
    written, on the row as it is now (a take-over, a status change or an event that landed since
    the page was read is never written back over); a change of assignee is an ``assigned`` event,
    the others one ``edited`` event naming what changed. A closed ticket is final: any change is refused."""
    unknown = sorted(set(changes) - set(TICKET_EDITABLE_FIELDS))
    if unknown:
        raise ValidationError(f"These fields of a ticket cannot be edited: {', '.join(unknown)}.", code="not_editable")
    assignee = changes.get("assignee")
    if assignee is not None and not (assignee.is_active and assignee.has_perm(HANDLE_PERMISSION)):
        # Only a person who can work tickets (active, with tickets.handle_ticket) is given one.
        raise ValidationError(
            f"{assignee.get_username()} cannot work tickets; nothing was changed.", code="cannot_work_tickets"
        )
    with transaction.atomic():
        locked = _locked(ticket)
        if changes:
            _not_closed(locked)  # as ``ticket_assign_to`` and the buttons: nothing more happens on it
        if "assignee" in changes:
            _set_assignee(locked, changes["assignee"], user)
        edited: dict[str, dict[str, str]] = {}
        for name in ("subject", "priority"):
            if name not in changes or getattr(locked, name) == changes[name]:
                continue
            value = _clean_subject(changes[name]) if name == "subject" else _choice(TicketPriority, changes[name])
            edited[name] = {"from": getattr(locked, name), "to": value}
            setattr(locked, name, value)
        if edited:
            rows.update([locked], [*edited])  # updated_at moves on with the event's write, on the database's clock
            event_append(ticket=locked, kind="edited", actor_kind=ActorKind.STAFF, actor_user=user, payload=edited)
    return locked


def _clean_subject(subject: Any) -> str:
    text = str(subject or "").strip()
    if not text:
        raise ValidationError("A subject cannot be empty.", code="subject_empty")
    return _subject_checked(text)


def _subject_checked(subject: str) -> str:
    """The subject, or a ValidationError saying why it cannot be stored."""
    if len(subject) > SUBJECT_MAX_CHARS:
        raise ValidationError(f"A subject can be at most {SUBJECT_MAX_CHARS} characters.", code="subject_too_long")
    _storable_or_refuse(subject, "The subject")
    return subject


def _choice(choices: type[models.TextChoices], value: Any) -> str:
    if value not in choices.values:
        raise ValidationError(
            f"{value!r} is not one of: {', '.join(choices.values)}.", code=f"bad_{choices.__name__.lower()}"
        )
    return value


def client_key(client_msg_id: str | None) -> str:
    """A message ID sent by a customer's or a staff member's client, checked. The product's own
    messages are keyed ``<kind>:<id>`` (``reply:7:0``, ``parked-note:7``, ``open:<ref>``): an ID
    from outside may not contain a colon, so it can never take a key the agent will post under."""
    key = (client_msg_id or "").strip()
    if not key or len(key) > 100:
        raise ValidationError("A client message ID must be 1 to 100 characters.", code="bad_client_msg_id")
    if ":" in key:
        raise ValidationError("A client message ID may not contain a colon (:).", code="bad_client_msg_id")
    return key


_NOTHING_CHANGED = "nothing was changed. Read the page again, then choose."


def _not_a_colleagues(ticket: Ticket, user: AbstractBaseUser) -> None:
    """Refuse a ticket a colleague has, asked for where no page says who has it (a bulk action)."""
    holder = ticket.assignee if ticket.status == TicketStatus.WITH_HUMAN else None
    if holder is not None and holder.pk != user.pk:
        raise InvalidTransition(
            f"{holder.get_username()} has ticket #{ticket.pk} already; nothing was changed.",
            code="invalid_transition",
        )


def _colleague_took_it_since(
    ticket: Ticket,
    user: AbstractBaseUser,
    holder_seen: int | None,
    refused: str = "your reply was not sent. Send it again to answer the customer and take the ticket from them.",
) -> None:
    """Refuse what was sent from a page read before a colleague took the ticket (``holder_seen``: who
    had it, by the page; None: the agent or nobody): a reply, an assignment. Sent again from the page
    that names them, it takes the ticket from them: that is then what was asked."""
    holder = ticket.assignee if ticket.status == TicketStatus.WITH_HUMAN else None
    if holder is not None and holder.pk != user.pk and holder.pk != holder_seen:
        raise InvalidTransition(
            f"{holder.get_username()} has taken ticket #{ticket.pk} since this page was opened; {refused}",
            code="invalid_transition",
        )


def _given_to_nobody_since(ticket: Ticket, holder_seen: int | None) -> None:
    """Refuse what was asked from a page that named who had the ticket (``holder_seen``) when it is
    now with a person and nobody is assigned: since that page was read, it was handed back and the
    agent handed it to a person again (or someone unassigned it). Handing it back or finishing it
    from that page would undo a hand-off the person never saw; the page read again shows it."""
    if holder_seen is not None and ticket.status == TicketStatus.WITH_HUMAN and ticket.assignee_id is None:
        raise InvalidTransition(
            f"Ticket #{ticket.pk} was handed to a person, with nobody assigned, since this page was opened (the "
            f"agent stopped and says why on the timeline); {_NOTHING_CHANGED}",
            code="invalid_transition",
        )


def _resolved_or_assigned_since(
    ticket: Ticket, seq: int, user: AbstractBaseUser, again: str = "Take it over again from this page"
) -> None:
    """Refuse a take-over (or a reply, which takes the ticket) asked from a page that showed the
    ticket up to event ``seq`` when someone else resolved it since (taking it would reopen it) or
    assigned it to someone else since (it would take it from them). From the page that shows it,
    it is what was asked."""
    later = TicketEvent.objects.filter(ticket=ticket, seq__gt=seq).exclude(actor_user=user)
    if (
        ticket.status == TicketStatus.RESOLVED
        and later.filter(kind="status_changed", payload__to=TicketStatus.RESOLVED).exists()
    ):
        raise InvalidTransition(
            f"Ticket #{ticket.pk} was resolved since this page was opened; nothing was changed. {again} to reopen it.",
            code="invalid_transition",
        )
    if ticket.assignee_id not in {None, user.pk} and later.filter(kind="assigned").exists():
        raise InvalidTransition(
            f"Ticket #{ticket.pk} was assigned to {ticket.assignee.get_username()} since this page was opened; "
            f"nothing was changed. {again} to take it from them.",
            code="invalid_transition",
        )


def _handed_back_since(ticket: Ticket, seq: int, user: AbstractBaseUser) -> None:
    """Refuse a reply written on a page that showed the ticket up to event ``seq`` when someone else
    handed it back to the agent since, and the agent has it now: the page said a person had it (the
    agent silent), and the agent may have answered since what the reply answers. Sent, the customer
    read the answer twice and the ticket went from the agent to the person unseen. From the page that
    shows the hand-back, the reply takes the ticket, as any reply does."""
    if ticket.status in AGENT_STAYS_OUT:
        return
    handed_back = (
        TicketEvent.objects.filter(ticket=ticket, seq__gt=seq, kind="status_changed")
        .filter(payload__from=TicketStatus.WITH_HUMAN, payload__to=TicketStatus.OPEN)
        .exclude(actor_user=user)
        .select_related("actor_user")
        .order_by("-seq")
        .first()
    )
    if handed_back is not None:
        raise InvalidTransition(
            f"{staff_name(handed_back.actor_user)} handed ticket #{ticket.pk} back to the agent since this page was "
            "opened (the agent may have answered the customer already); your reply was not sent. Read what is new, "
            "then send it again to take the ticket from the agent.",
            code="invalid_transition",
        )


def _given_to_a_person_after(ticket: Ticket, seq: int, user: AbstractBaseUser) -> bool:
    """Whether someone other than ``user`` gave the ticket to a person after timeline event ``seq``."""
    return (
        TicketEvent.objects.filter(
            ticket=ticket, seq__gt=seq, kind="status_changed", payload__to=TicketStatus.WITH_HUMAN
        )
        .exclude(actor_user=user)
        .exists()
    )


def _staff_message(
    *,
    ticket: Ticket | int,
    user: AbstractBaseUser,
    body: str,
    client_msg_id: str,
    is_public: bool,
    holder_seen: int | None | object = ...,
    seen_seq: int | None = None,
) -> tuple[Message, bool]:
    text = _clean_body(body)
    key = client_key(client_msg_id)
    existing = Message.objects.filter(ticket_id=_ticket_id(ticket), client_msg_id=key).first()
    if existing is not None:  # a double click or a retried form: the original, nothing new
        return _same_message(existing, text, author=(AuthorKind.STAFF, user.pk)), False
    try:
        with transaction.atomic():
            locked = _locked(ticket)
            # Looked for again with the row held: a first send committed while this one waited for the
            # row (a double click) is its result, whatever happened on the ticket after it.
            existing = Message.objects.filter(ticket_id=locked.pk, client_msg_id=key).first()
            if existing is not None:
                return _same_message(existing, text, author=(AuthorKind.STAFF, user.pk)), False
            if is_public and holder_seen is not ...:
                _colleague_took_it_since(locked, user, holder_seen)  # type: ignore[arg-type]
            if is_public and seen_seq is not None:
                _resolved_or_assigned_since(locked, seen_seq, user, "Your reply was not sent: send it again")
                _handed_back_since(locked, seen_seq, user)
            if is_public:
                _with_person_locked(locked, user)
                # What the customer asked so far is answered by a person: after a hand-back the
                # agent answers only what comes next, with this reply in its conversation.
                unanswered_before = Message.objects.filter(
                    ticket_id=locked.pk, author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True
                )
                if seen_seq is not None:  # what the page never showed is not answered by this reply
                    unseen = list(_customer_messages_after(locked, seen_seq))
                    unanswered_before = unanswered_before.exclude(pk__in=unseen)
                unanswered_before.update(agent_handled_at=timezone.now())
            elif locked.status == TicketStatus.CLOSED:
                raise InvalidTransition(f"Ticket #{locked.pk} is closed; nothing more can happen on it.", code="closed")
            message = Message.objects.create(
                ticket_id=locked.pk, author_kind=AuthorKind.STAFF, author_user=user, body=text,
                is_public=is_public, client_msg_id=key,
            )  # fmt: skip
            _message_event(message, "", None, author_name=signature(user), seen_seq=seen_seq if is_public else None)
            ticket_id = locked.pk
            transaction.on_commit(lambda: ticket_staff_wrote.send(sender=Message, ticket_id=ticket_id))
    except IntegrityError:
        existing = Message.objects.filter(ticket_id=_ticket_id(ticket), client_msg_id=key).first()
        if existing is None:
            raise
        return _same_message(existing, text, author=(AuthorKind.STAFF, user.pk)), False
    return message, True


def staff_reply(
    *,
    ticket: Ticket | int,
    user: AbstractBaseUser,
    body: str,
    client_msg_id: str,
    holder_seen: int | None | object = ...,
    seen_seq: int | None = None,
) -> tuple[Message, bool]:
    """A person answers the customer, under their own name. Replying takes the ticket (the
    agent stays out until it is handed back). Idempotent on ``client_msg_id``. ``holder_seen``:
    who had the ticket on the page the reply was written on (the staff page sends it); a
    colleague who took it since makes the reply a conflict, not a silent take-over. ``seen_seq``:
    the last timeline event that page showed; the customer's messages after it stay unanswered
    (the inbox still shows them waiting, and the agent answers them after a hand-back)."""
    return _staff_message(
        ticket=ticket, user=user, body=body, client_msg_id=client_msg_id, is_public=True, holder_seen=holder_seen,
        seen_seq=seen_seq,
    )  # fmt: skip


def staff_note(*, ticket: Ticket | int, user: AbstractBaseUser, body: str, client_msg_id: str) -> tuple[Message, bool]:
    """An internal note: on the staff timeline only, never shown or sent to the customer, never
    read by the agent. Changes no status. Idempotent on ``client_msg_id``."""
    return _staff_message(ticket=ticket, user=user, body=body, client_msg_id=client_msg_id, is_public=False)


# --- What the customer does besides writing (My tickets, the rating) -----------------------------


def ticket_mark_seen(*, ticket: Ticket | int, seq: int) -> bool:
    """The customer has seen their chat up to event ``seq``: replies up to it are no longer unread.

    Only moves forward (a stale tab cannot make read replies unread again) and never past the
    timeline's end. Appends no event and leaves ``updated_at`` alone: reading changes nothing in
    the conversation. Returns whether the mark moved.
    """
    seq = min(seq, BIGINT_MAX)  # never past the timeline's end anyway; a bigger number cannot be sent
    with transaction.atomic():
        behind = Ticket.objects.filter(pk=_ticket_id(ticket), customer_seen_seq__lt=Least(seq, F("last_event_seq")))
        moved = behind.update(customer_seen_seq=Least(seq, F("last_event_seq")))
    return bool(moved)


class RatingRefused(ValidationError):
    """A rating of a ticket that is not resolved (or closed after it was resolved)."""


def ticket_rate(
    *, ticket: Ticket | int, user: AbstractBaseUser, score: int | str, comment: str = ""
) -> tuple[TicketRating, bool]:
    """The ticket's customer rates the help they got, 1 to 5 with an optional comment; returns
    (rating, changed).

    Precondition: ``user`` reached the ticket through ``selectors.ticket_get_for_customer``.
    Only a resolved ticket (or one closed after it was resolved) takes a rating (RatingRefused).
    One rating per ticket: rating again replaces it and is recorded as a change; the same score
    and comment again (a double click, a second tab) changes nothing and records nothing.
    """
    try:
        value = int(score)
    except (TypeError, ValueError):
        value = 0
    if value not in RATING_SCORES:
        raise ValidationError("Choose a rating from 1 to 5.", code="bad_score")
    text = one_line_break(comment or "").strip()
    _storable_or_refuse(text, "The comment")
    if len(text) > RATING_COMMENT_MAX_CHARS:
        raise ValidationError(
            f"A comment can be at most {RATING_COMMENT_MAX_CHARS} characters; this one has {len(text)}.",
            code="comment_too_long",
        )
    with transaction.atomic():
        locked = _locked(ticket)
        if not ticket_can_be_rated(locked):
            raise RatingRefused(
                "You can rate a conversation once it is resolved. Reply here if you still need help.",
                code="not_resolved",
            )
        rating = TicketRating.objects.filter(ticket=locked).first()
        previous = rating.score if rating is not None else None
        if rating is not None and (rating.score, rating.comment) == (value, text):
            return rating, False
        now = timezone.now()
        if rating is None:
            rating = TicketRating.objects.create(
                ticket=locked, score=value, comment=text, created_at=now, updated_at=now
            )
        else:
            rating.score, rating.comment, rating.updated_at = value, text, now
            rating.save(update_fields=["score", "comment", "updated_at"])
        event_append(
            ticket=locked,
            kind="rated",
            actor_kind=ActorKind.CUSTOMER,
            actor_user=user,
            payload={"score": value, "comment": text, "previous_score": previous},
            is_public=True,
        )
    return rating, True
