from __future__ import annotations

from django.apps import AppConfig


class StaffConfig(AppConfig):
    name = "staff"
    verbose_name = "Staff inbox"
