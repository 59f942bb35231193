"""The fields a customer's form or JSON body may carry: those its endpoint reads, each once.

Anything else is refused with a 400 that names it, never dropped unread: a photo sent as ``file``
rather than ``files``, a comment sent as ``comments``, an amount beside a Confirm, a second
``body`` or ``answer`` (as with a JSON key named twice, which value counts would be the parser's
choice: Django's is the last) would otherwise be lost without a word."""

from __future__ import annotations

from collections.abc import Iterable

from django.http import HttpRequest

# What a plain form carries beside its own fields.
CSRF_FIELD = "csrfmiddlewaretoken"


def unread(names: Iterable[str], reads: Iterable[str]) -> list[str]:
    """The names among ``names`` that are not in ``reads``."""
    known = set(reads)
    return [name for name in names if name not in known]


def form_unread(request: HttpRequest, reads: Iterable[str], *, files: Iterable[str] = ()) -> list[str]:
    """The form's fields (and files) its endpoint does not read: ``reads`` and the CSRF field, and
    files under the names in ``files``."""
    return unread(request.POST, [*reads, CSRF_FIELD]) + unread(request.FILES, files)


def form_twice(request: HttpRequest) -> list[str]:
    """The form's fields sent more than once (files, in ``request.FILES``, are apart: ``files`` may
    hold several)."""
    return [name for name, values in request.POST.lists() if len(values) > 1]


def listed(names: list[str]) -> str:
    """The names as a customer reads them: 'photo', 'order_number'."""
    return ", ".join(repr(name[:40]) for name in names[:5])


def twice_words(names: list[str]) -> str:
    return listed(names) + (" was" if len(names) == 1 else " were") + " sent twice"
