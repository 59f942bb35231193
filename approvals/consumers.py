from __future__ import annotations

import asyncio
import time
from typing import Any

from channels.db import database_sync_to_async

from approvals.selectors import approvals_pending_mark
from approvals.services import STAFF_GROUP, can_decide
from support.websocket import SignedInConsumer, check_when_quiet
from tickets import realtime


class ApprovalsConsumer(SignedInConsumer):
    """Tells an open dashboard that the pending list changed; the page then reloads it over HTTP.

    ``{"type": "ready"}`` first, once the socket is in the staff group: the page reads the list then,
    not when the socket opens (open before the join, a request made between that read and the join
    rang nobody, and the page said "Live" without it). Then ``{"type": "changed", ...}`` per change.
    A request paused by a worker cut off from Redis rings nobody: after a quiet spell the socket reads
    the pending list's mark and, moved, rings the page itself (``"change": "seen"``). The one frame it
    reads from the browser is ``{"type": "ping"}``, answered ``{"type": "pong"}`` as on every socket
    (``support.websocket.SafeJsonConsumer``).
    """

    mark: tuple[int, int, int] = (0, 0, 0)
    last_rung: float = 0.0
    quiet_check: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        # Accept first: a close code (4403: not an approver, or signed out) only reaches the browser
        # on an open socket; refused at the handshake, the page could only retry forever.
        await self.accept()
        user = self.scope.get("user")
        if user is None or not await database_sync_to_async(can_decide)(user):
            await self.close(code=self.closed_code)
            return
        if not await self.watch_sign_in():
            return
        await realtime.group_join(self.channel_layer, STAFF_GROUP, self.channel_name)
        self.mark, self.last_rung = await database_sync_to_async(approvals_pending_mark)(), time.monotonic()
        await self.send_json({"type": "ready"})
        self.quiet_check = asyncio.create_task(check_when_quiet(lambda: self.last_rung, self._look_when_quiet))

    async def disconnect(self, code: int) -> None:
        if self.quiet_check is not None:
            self.quiet_check.cancel()
        await self.channel_layer.group_discard(STAFF_GROUP, self.channel_name)
        await self.leave_sign_in_groups()

    def may_watch(self, user: Any) -> bool:
        return can_decide(user)

    async def approvals_changed(self, event: dict[str, Any]) -> None:
        self.last_rung = time.monotonic()
        if not await self.still_signed_in():
            return
        await self.send_json({"type": "changed", "approval_id": event["approval_id"], "change": event["change"]})

    async def _look_when_quiet(self) -> None:
        mark = await database_sync_to_async(approvals_pending_mark)()
        if mark != self.mark:
            self.mark = mark
            await self.approvals_changed({"approval_id": None, "change": "seen"})
