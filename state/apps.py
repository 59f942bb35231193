from __future__ import annotations

from django.apps import AppConfig


class StateConfig(AppConfig):
    name = "state"
    label = "state"
    verbose_name = "State bundles: export, restore, verify"
