from __future__ import annotations

app_name = "tickets"
urlpatterns: list = []
