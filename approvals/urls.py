from __future__ import annotations

from django.urls import path

from approvals import views

app_name = "approvals"
urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("pending/", views.pending_fragment, name="pending"),
    path("history/", views.history, name="history"),
    path("<int:approval_id>/decide/", views.decide, name="decide"),
]
