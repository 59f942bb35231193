from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from approvals.services import STAFF_GROUP, can_decide
from support.websocket import SignedInConsumer
from tickets import realtime


class ApprovalsConsumer(SignedInConsumer):
    """Tells an open dashboard that the pending list changed; the page then reloads it over HTTP.

    ``{"type": "ready"}`` first, once the socket is in the staff group: the page reads the list then,
    not when the socket opens (open before the join, a request made between that read and the join
    rang nobody, and the page said "Live" without it). Then ``{"type": "changed", ...}`` per change.
    """

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
        await self.send_json({"type": "ready"})

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(STAFF_GROUP, self.channel_name)
        await self.leave_sign_in_groups()

    def may_watch(self, user: Any) -> bool:
        return can_decide(user)

    async def approvals_changed(self, event: dict[str, Any]) -> None:
        if not await self.still_signed_in():
            return
        await self.send_json({"type": "changed", "approval_id": event["approval_id"], "change": event["change"]})
