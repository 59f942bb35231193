"""The Celery application. Workers: ``celery -A support worker``; beat: ``celery -A support beat``."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "support.settings")

app = Celery("support")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
