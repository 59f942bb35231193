"""``/ws/staff/tickets/<id>/``: rings a staff page when a ticket's timeline changes.

Frames to the browser: ``{"type": "ready"}`` once the socket is in the ticket's group, then
``{"type": "changed"}`` at each change; the page fetches what is new over HTTP (``staff:timeline``)
at each of them, so internal events never travel on a socket a customer could open, and a lost frame
costs nothing (the next one, or a reconnect, fetches everything after the page's last seq). The page
catches up on "ready", not when the socket opens: the socket is open before it has joined the group,
and a change committed between a catch-up read then and the join rang nobody (the page showed
"Live" without it until something else changed). Closed with 4403 for anyone without
``tickets.handle_ticket``. The one frame it reads from the browser is ``{"type": "ping"}``, answered
``{"type": "pong"}`` as on every socket (``support.websocket.SafeJsonConsumer``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from channels.db import database_sync_to_async

from support.websocket import SignedInConsumer, check_when_quiet
from tickets import realtime
from tickets.models import HANDLE_PERMISSION, Ticket

CLOSE_NOT_ALLOWED = 4403
CLOSE_NO_SUCH_TICKET = 4404


def _allowed(user: Any) -> bool:
    return bool(user is not None and user.is_authenticated and user.is_active and user.has_perm(HANDLE_PERMISSION))


class StaffTicketConsumer(SignedInConsumer):
    group: str | None = None
    ticket_id: int = 0
    # The timeline's last number as this socket last told the page of it, and when it last rang.
    known_seq: int = 0
    last_rung: float = 0.0
    quiet_check: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        await self.accept()
        if not await database_sync_to_async(_allowed)(self.scope.get("user")):
            await self.close(code=CLOSE_NOT_ALLOWED)
            return
        ticket_id = int(self.scope["url_route"]["kwargs"]["ticket_id"])
        seq = await database_sync_to_async(self._last_seq)(ticket_id)
        if seq is None:
            await self.close(code=CLOSE_NO_SUCH_TICKET)
            return
        if not await self.watch_sign_in():
            return
        self.ticket_id, self.known_seq, self.last_rung = ticket_id, seq, time.monotonic()
        self.group = realtime.group_name(ticket_id)
        await realtime.group_join(self.channel_layer, self.group, self.channel_name)
        await self.send_json({"type": "ready"})
        self.quiet_check = asyncio.create_task(check_when_quiet(lambda: self.last_rung, self._look_when_quiet))

    async def disconnect(self, code: int) -> None:
        if self.quiet_check is not None:
            self.quiet_check.cancel()
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
        await self.leave_sign_in_groups()

    def may_watch(self, user: Any) -> bool:
        return _allowed(user)

    async def ticket_event(self, message: dict[str, Any]) -> None:
        self.last_rung = time.monotonic()
        if await self.still_signed_in():
            await self.send_json({"type": "changed"})

    async def _look_when_quiet(self) -> None:
        """After a quiet spell without a ring (``check_when_quiet``), one look at the ticket's timeline
        number (its row, by key): moved on since, the page is told as a doorbell would have."""
        seq = await database_sync_to_async(self._last_seq)(self.ticket_id)
        if seq is not None and seq > self.known_seq:
            self.known_seq = seq
            await self.ticket_event({"type": "ticket.event"})

    @staticmethod
    def _last_seq(ticket_id: int) -> int | None:
        return Ticket.objects.filter(pk=ticket_id).values_list("last_event_seq", flat=True).first()

    async def ticket_token(self, message: dict[str, Any]) -> None:
        """The agent's answer streaming: staff read the answer when it is posted."""
