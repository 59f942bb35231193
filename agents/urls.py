from __future__ import annotations

from django.urls import path

from agents import views

app_name = "agents"
urlpatterns = [
    path(
        "tickets/<int:ticket_id>/confirmations/<int:call_id>",
        views.confirmation_answer,
        name="confirmation_answer",
    ),
]
