from __future__ import annotations

from django.urls import path

from approvals.consumers import ApprovalsConsumer
from tickets.consumers import TicketConsumer

websocket_urlpatterns = [
    path("ws/tickets/<int:ticket_id>/", TicketConsumer.as_asgi()),
    path("ws/staff/approvals/", ApprovalsConsumer.as_asgi()),
]
