"""Periodic rounds over many rows (the reconciler, expiring approvals and questions), each row on its own.

A row whose work fails in a way no code foresaw (a provider's answer of a new shape, a row an
operator edited by hand) is logged and left for the next round; the round goes on with the others.
Without this, the first such row failed the whole round on every tick, and every row after it
waited for ever: a refund never settled, an approval never expired, a customer never told.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from django.db import connection

logger = logging.getLogger(__name__)


class Round:
    """One round; ``failed`` counts the rows whose work failed in it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.failed = 0

    @contextlib.contextmanager
    def row(self, what: str) -> Iterator[None]:
        """The work on one row: a failure is logged with ``what`` (the row) and the round goes on.
        A transaction inside has rolled back by then; a connection the failure broke is replaced."""
        try:
            yield
        except Exception:  # noqa: BLE001 - any failure of one row's work: logged, the round goes on
            self.failed += 1
            logger.exception("%s: %s failed; left for the next round", self.name, what)
            connection.close_if_unusable_or_obsolete()
