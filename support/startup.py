"""Checks of the configuration that need the app registry, run once at start (``ready``)."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string


def check_class_paths() -> None:
    """The classes the environment names are imported now: Django imports them at first use, so a
    typo started every process without a word and failed the first mail sent, or the first
    attachment stored, instead."""
    named = {
        "EMAIL_BACKEND": settings.EMAIL_BACKEND,
        "MEDIA_STORAGE_BACKEND": settings.STORAGES["default"]["BACKEND"],
    }
    for variable, path in named.items():
        try:
            import_string(path)
        except ImportError as exc:
            raise ImproperlyConfigured(f"{variable}={path!r} is not an importable class path: {exc}") from None
