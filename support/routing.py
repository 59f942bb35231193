from __future__ import annotations

from django.urls import path, re_path

from approvals.consumers import ApprovalsConsumer
from staff.consumers import StaffTicketConsumer
from support.websocket import NotFoundConsumer
from tickets.consumers import TicketConsumer

websocket_urlpatterns = [
    path("ws/tickets/<int:ticket_id>/", TicketConsumer.as_asgi()),
    path("ws/staff/approvals/", ApprovalsConsumer.as_asgi()),
    path("ws/staff/tickets/<int:ticket_id>/", StaffTicketConsumer.as_asgi()),
    re_path(r"", NotFoundConsumer.as_asgi()),  # anything else: closed with 4404, not a crash
]
