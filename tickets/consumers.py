"""The customer's live chat: ``/ws/tickets/<id>/?after=<seq>``.

Frames sent to the browser (JSON):

- ``{"type": "event", "seq", "kind", ...}``: a public timeline event, as
  ``tickets.presenters`` renders it; sent in seq order, each seq at most once
  per connection;
- ``{"type": "token", "step", "offset", "text"}``: a piece of the answer being
  streamed; ``offset`` is where ``text`` starts in that step's answer, so the
  browser appends only what it does not have yet;
  with ``"dropped": true`` (and no text), that step failed and its answer will not be posted:
  the browser takes its words off the page;
- ``{"type": "ready", "seq"}``: the replay is done; live frames follow.

The socket closes (4403) when the sign-in it was opened with ends: signed out, the password
changed, the account deactivated (``support.websocket.SignedInConsumer``); and (4401) when the
ticket is no longer its login's (the customer's profile moved to another login in the admin).

Frames from the browser: ``{"type": "resync"}`` asks for the events and the
streamed text again (the browser saw a gap in a step's offsets);
``{"type": "seen", "seq"}`` says the customer has seen the chat up to ``seq`` (the page
was visible when those events arrived): My tickets stops showing those replies as unread;
``{"type": "ping"}`` is answered with ``{"type": "pong"}``, as on every socket
(``support.websocket.SafeJsonConsumer``: a page whose socket has been quiet asks whether it still
carries anything).
Any other frame, and a ``seen`` without a whole-number ``seq``, is answered with
``{"type": "error", "error"}`` (``support.websocket.SafeJsonConsumer``); the socket stays open.

The order on connect rules out gaps: join the group first, then read the
ledger and the streaming buffer. Anything committed or streamed after the read
arrives through the group; anything both read and received is a duplicate the
seq (events) or the offset (tokens) drops.

A timeline doorbell's ledger read runs beside the group's other messages, not in
front of them, and a token touches no database (but for the sign-in's recheck, at most
every ``SIGN_IN_RECHECK_SECONDS`` and past the session's end): the answer's first tokens,
published just after the run's "typing" event, go out while that event (or any
other socket's) is being read instead of waiting for it. Events stay in seq
order (one read at a time); a token that arrives after its step's message is
old news the browser drops.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.http import Http404

from support.websocket import SignedInConsumer, check_when_quiet
from tickets import presenters, realtime, selectors, services
from tickets.models import AGENT_STAYS_OUT, BIGINT_MAX, AuthorKind, Ticket, TicketEvent, TicketStatus

logger = logging.getLogger(__name__)

CLOSE_NOT_SIGNED_IN = 4403
CLOSE_NO_SUCH_TICKET = 4404
RESYNC_MIN_SECONDS = 0.5
# How far back the timeline is read on connect to learn whether the agent is at work (the page's
# typing indicator): the last event that turns it on or off is among the latest few.
AT_WORK_LOOKBACK = 50
# The ticket's states in which staff are to act, and the customer to hear of it (a reply, a decision and
# the agent's answer after it), their rings lost or not.
WAITS_ON_STAFF = frozenset({TicketStatus.WITH_HUMAN, TicketStatus.PENDING_APPROVAL})
# While the customer waits on nobody, the socket looks at the ledger after this many quiet spells (a
# minute): a person may still write unprompted, taking the ticket in the same stroke, and that one ring
# is all that would tell the socket. One indexed read a minute per such socket.
IDLE_LOOK_EVERY = 6


def _after(query_string: bytes) -> int:
    """``?after=<seq>``: a whole number of the timeline's range (no event is past a bigint)."""
    values = parse_qs(query_string.decode("latin-1")).get("after", ["0"])
    try:
        return min(max(0, int(values[0])), BIGINT_MAX)
    except ValueError:
        return 0


class TicketConsumer(SignedInConsumer):
    frame_types = ("resync", "seen")
    ticket: Ticket | None = None
    group: str | None = None
    last_seq: int = 0
    last_resync: float = float("-inf")
    seen_seq: int = 0
    # The ledger read a doorbell started, and whether another doorbell rang meanwhile.
    reading: asyncio.Task[None] | None = None
    ring_again: bool = False
    read_lock: asyncio.Lock
    # Is the customer waiting on the agent (their message not answered yet, or the agent typing), and
    # when this socket last sent them anything: see ``_look_when_quiet``.
    agent_at_work: bool = False
    status: str = ""
    last_sent: float = 0.0
    quiet_check: asyncio.Task[None] | None = None
    quiet_spells: int = 0

    async def connect(self) -> None:
        self.read_lock = asyncio.Lock()
        # Accept first: a close code (4403/4404) only reaches the browser on an open socket.
        await self.accept()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_NOT_SIGNED_IN)
            return
        ticket_id = int(self.scope["url_route"]["kwargs"]["ticket_id"])
        try:
            self.ticket = await database_sync_to_async(selectors.ticket_get_for_customer)(
                user=user, ticket_id=ticket_id
            )
        except Http404:
            await self.close(code=CLOSE_NO_SUCH_TICKET)
            return
        if not await self.watch_sign_in():  # signed out meanwhile (or later: the socket closes then)
            return
        # Never past the timeline's end: a page that claims more (a crafted URL, a restored database)
        # would be sent nothing until the timeline caught up with it.
        self.last_seq = min(_after(self.scope.get("query_string", b"")), self.ticket.last_event_seq)
        self.status = self.ticket.status  # as read now; the events sent from here on move it on
        self.group = realtime.group_name(self.ticket.pk)
        await realtime.group_join(self.channel_layer, self.group, self.channel_name)
        await self._catch_up()
        self.agent_at_work = self.agent_at_work or await database_sync_to_async(self._agent_at_work)()
        await self.send_json({"type": "ready", "seq": self.last_seq})
        self.quiet_check = asyncio.create_task(check_when_quiet(lambda: self.last_sent, self._look_when_quiet))

    async def disconnect(self, code: int) -> None:
        for task in (self.reading, self.quiet_check):
            if task is not None:
                task.cancel()
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
        await self.leave_sign_in_groups()

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if self.ticket is None:
            return
        if content["type"] == "seen":
            await self._seen(content.get("seq"))
            return
        now = time.monotonic()
        if now - self.last_resync < RESYNC_MIN_SECONDS:
            return  # a browser asks once per gap; more often is noise (or abuse) and costs queries
        self.last_resync = now
        await self._catch_up()

    # --- group messages ---------------------------------------------------------------

    async def dispatch(self, message: dict[str, Any]) -> None:
        if message.get("type") == "ticket.token":
            # Straight to the socket. Channels first closes stale database connections before
            # every handler, on the one thread all of this process's sockets share for database
            # work, so a token would wait behind any socket's ledger read; this one uses none.
            await self.ticket_token(message)
            return
        await super().dispatch(message)

    async def ticket_event(self, message: dict[str, Any]) -> None:
        # A doorbell: whatever is new in the ledger goes out, in seq order, so a lost or
        # reordered notification costs nothing. Doorbells that ring during a read are answered
        # by one more read after it.
        self.ring_again = True
        if self.reading is None or self.reading.done():
            self.reading = asyncio.create_task(self._answer_doorbells())

    async def ticket_token(self, message: dict[str, Any]) -> None:
        # Its sign-in checked as for events: at most every SIGN_IN_RECHECK_SECONDS (a lost sign-out
        # notice), and at once past the session's end (an expiry sends none).
        if not await self.still_signed_in():
            return
        frame = {"type": "token", "step": message["step"], "offset": message["offset"], "text": message["text"]}
        if message.get("dropped"):
            frame["dropped"] = True  # the step failed: its answer will not be posted
        else:
            self.agent_at_work = True  # its answer is streaming: its message is to come
        await self.send_json(frame)

    # --- helpers -------------------------------------------------------------------------

    async def _answer_doorbells(self) -> None:
        try:
            while self.ring_again:
                self.ring_again = False
                await self._send_events()
        except Exception:  # noqa: BLE001 - handled as before: the socket closes
            # As if the read had failed in the handler: the socket closes and the browser
            # reconnects and catches up from the ledger.
            logger.warning("ticket %s: reading new events failed; closing the socket", self.ticket.pk, exc_info=True)
            await self.close()

    async def send_json(self, content: Any, close: bool = False) -> None:
        self.last_sent = time.monotonic()
        await super().send_json(content, close=close)

    async def _look_when_quiet(self) -> None:
        """After a quiet spell (``check_when_quiet``), while the customer waits on someone: read the
        ledger, so an answer stored by a worker or a web server whose doorbell never came is shown.
        While they wait on nobody, after every ``IDLE_LOOK_EVERY`` quiet spells."""
        self.quiet_spells += 1
        if self._customer_waits() or self.quiet_spells % IDLE_LOOK_EVERY == 0:
            await self.ticket_event({"type": "ticket.event"})

    def _customer_waits(self) -> bool:
        """Is someone to write to the customer? A person who has the ticket, staff deciding on a request of
        theirs (the agent answers after it), or the agent at work on a ticket no person holds. A person's
        reply rings through Redis as a worker's does, and is lost with it."""
        if self.status in WAITS_ON_STAFF:
            return True
        return self.agent_at_work and self.status not in AGENT_STAYS_OUT

    def _agent_at_work(self) -> bool:
        """On connect: is the customer waiting on the agent? A message of theirs no turn has taken in,
        or the agent typing as the page shows it (the latest event that turns it on or off)."""
        if selectors.has_unanswered_messages(ticket_id=self.ticket.pk):
            return True
        latest = TicketEvent.objects.filter(ticket=self.ticket, is_public=True).order_by("-seq")[:AT_WORK_LOOKBACK]
        for event in latest:
            item = presenters.present_event(event)
            if item is not None and "typing" in item:
                return bool(item["typing"])
        return False

    def _follow(self, item: dict[str, Any]) -> None:
        """What an event sent says of the agent's work: the customer wrote (an answer is to come), or
        the typing indicator goes on or off."""
        if item.get("kind") == "message" and item.get("author") == AuthorKind.CUSTOMER:
            self.agent_at_work = True
        if "typing" in item:
            self.agent_at_work = bool(item["typing"])
        if isinstance(item.get("status"), str):
            self.status = item["status"]

    async def _seen(self, seq: Any) -> None:
        # Never past what this connection sent, and only forward: at most one write per event.
        if not isinstance(seq, int) or isinstance(seq, bool):
            await self.send_json({"type": "error", "error": "A seen frame needs seq, a whole number."})
            return
        seq = min(seq, self.last_seq)
        if seq <= self.seen_seq:
            return
        self.seen_seq = seq
        await database_sync_to_async(services.ticket_mark_seen)(ticket=self.ticket.pk, seq=seq)

    async def _catch_up(self) -> None:
        # Asked by the browser (a resync): its sign-in is checked now, whatever notice is on its way.
        if not await self.still_signed_in(force=True):
            return
        await self._send_events()
        step, text = await sync_to_async(realtime.streamed_so_far)(self.ticket.pk)
        if step is not None and text and not await database_sync_to_async(self._posted)(step):
            await self.send_json({"type": "token", "step": step, "offset": 0, "text": text})

    def may_watch(self, user: Any) -> bool:
        """The ticket is still this login's: a profile moved to another login takes its tickets along."""
        return self.ticket is not None and selectors.ticket_owned_by(user=user, ticket_id=self.ticket.pk)

    def _posted(self, step: int) -> bool:
        """Is the answer streamed under ``step`` posted already (its buffer not yet cleared: the reply
        commits first, or the worker stopped in between)? The page shows the message, not the stream."""
        return selectors.stream_posted(ticket=self.ticket, stream=step)

    async def _send_events(self) -> None:
        if not await self.still_signed_in():
            return
        async with self.read_lock:  # a doorbell's read and a resync's never send the same events twice
            items, last_seq = await database_sync_to_async(self._load)(self.last_seq)
            for item in items:
                self._follow(item)
                await self.send_json({"type": "event", **item})
            self.last_seq = max(self.last_seq, last_seq)

    def _load(self, after: int) -> tuple[list[dict[str, Any]], int]:
        events = selectors.ticket_timeline(ticket=self.ticket, after_seq=after, public_only=True)
        return presenters.present_events(events)
