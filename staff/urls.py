from __future__ import annotations

from django.urls import path

from staff import views

app_name = "staff"
urlpatterns = [
    path("", views.inbox, name="inbox"),
    path("tickets/<int:ticket_id>/", views.ticket, name="ticket"),
    path("tickets/<int:ticket_id>/timeline", views.timeline_after, name="timeline"),
    path("tickets/<int:ticket_id>/reply", views.reply, name="reply"),
    path("tickets/<int:ticket_id>/note", views.note, name="note"),
    path("tickets/<int:ticket_id>/take-over", views.take_over, name="take_over"),
    path("tickets/<int:ticket_id>/hand-back", views.hand_back, name="hand_back"),
    path("tickets/<int:ticket_id>/resolve", views.resolve, name="resolve"),
    path("tickets/<int:ticket_id>/close", views.close, name="close"),
    path("tickets/<int:ticket_id>/assign", views.assign, name="assign"),
]
