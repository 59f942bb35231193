"""Checks of the configuration that need the app registry, run once at start (``ready``)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.files.storage import FileSystemStorage, storages
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


def check_media_folder() -> None:
    """With a storage that keeps files in a folder (the default), that folder is made if missing and
    written to once now: one that cannot be (a read-only volume, a path through a file, another
    owner) was found only when the first customer sent a file, and their message was refused."""
    if not issubclass(import_string(settings.STORAGES["default"]["BACKEND"]), FileSystemStorage):
        return  # a bucket or the like (not even made here): its own client reports its errors
    options = settings.STORAGES["default"].get("OPTIONS") or {}
    try:
        storage = storages["default"]
    except TypeError as exc:  # an option the folder storage does not take (a bucket's, say)
        raise ImproperlyConfigured(f"MEDIA_STORAGE_OPTIONS: {exc}") from None
    if "location" in options:
        named = f"MEDIA_STORAGE_OPTIONS (its location {str(options['location'])!r})"
    else:
        named = f"MEDIA_ROOT={str(settings.MEDIA_ROOT)!r}"
    folder = Path(storage.location)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise ImproperlyConfigured(
            f"{named}: customers' attachments are stored in {str(folder)!r}, and this process cannot "
            f"write there ({type(exc).__name__}: {exc.strerror or exc}). Point it at a folder it can write to."
        ) from None
