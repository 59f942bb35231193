from __future__ import annotations

from channels.generic.websocket import AsyncJsonWebsocketConsumer


class TicketConsumer(AsyncJsonWebsocketConsumer):
    """The customer chat socket (being built)."""
