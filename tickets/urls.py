from __future__ import annotations

from django.urls import path

from tickets import views

app_name = "tickets"
urlpatterns = [
    path("", views.home, name="home"),
    path("tickets/", views.ticket_list, name="list"),
    path("tickets/new/", views.ticket_new, name="new"),
    path("tickets/<int:ticket_id>/", views.ticket_chat, name="chat"),
    path("tickets/<int:ticket_id>/messages", views.message_create, name="message_create"),
    path("tickets/<int:ticket_id>/rating", views.ticket_rate, name="rate"),
    path("attachments/<int:attachment_id>/", views.attachment_file, name="attachment"),
]
