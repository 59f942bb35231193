"""``{% load times %}`` then ``{{ moment|when }}`` (or ``|when:"time"``): a time on a staff page.

A ``<time>`` element carrying the instant, showing it to the second with its zone ("2026-12-05
21:05:53 UTC"): a person reading it from another zone is never left to guess. The page's script
(static/js/localtime.js) shows it in the reader's own zone, as the customer's chat does.
"""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()

SHOWN = {"datetime": "Y-m-d H:i:s T", "time": "H:i:s T"}


@register.filter(name="when")
def when(moment: datetime | None, part: str = "datetime") -> SafeString | str:
    if not isinstance(moment, datetime):
        return ""
    local = timezone.localtime(moment) if timezone.is_aware(moment) else moment
    return format_html(
        '<time datetime="{}" data-local="{}">{}</time>',
        local.isoformat(),
        part if part in SHOWN else "datetime",
        date_format(local, SHOWN.get(part, SHOWN["datetime"])),
    )
