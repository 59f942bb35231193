"""Which failures are an outage of something the agent depends on, not a problem of the ticket.

The model endpoint unreachable, timing out or answering 5xx or 429, the database's connection lost,
Redis or the payment provider out of reach: once the dependency is back the same step succeeds, so
such a failure is tried again for ``AGENT_OUTAGE_PATIENCE_SECONDS`` from the outage's first failure
(with a capped, jittered backoff) instead of counting towards ``AGENT_MAX_CONSECUTIVE_FAILURES``.
A bad model answer, a tool's error or a 4xx is about the ticket: counted as before.
"""

from __future__ import annotations

import random

import redis.exceptions
from django.conf import settings
from django.db import InterfaceError, OperationalError

from agents.llm import ModelError, ModelOutputInvalid
from payments.provider import WAIT_AND_ASK_AGAIN

# Statuses of a server that is overloaded, restarting or behind a gateway whose upstream is gone.
OUTAGE_STATUSES = frozenset({408, 409, 429})


def is_outage(exc: BaseException) -> bool:
    """Is ``exc`` (or what it was raised from) a dependency out of reach rather than the ticket's problem?"""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModelOutputInvalid):
            return False  # the model answered: what it said is the problem
        if isinstance(current, ModelError):
            code = current.status_code
            return current.unreachable or (code is not None and (code >= 500 or code in OUTAGE_STATUSES))
        if isinstance(current, OperationalError | InterfaceError):
            return True  # the connection lost, the server restarting, a deadlock: not the ticket's rows
        if isinstance(current, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
            return True
        if isinstance(current, WAIT_AND_ASK_AGAIN):
            return True  # out of reach, still working on the refund under its key, or asking us to slow down
        if isinstance(current, ConnectionError | TimeoutError):
            return True
        if current.__cause__ is not None:
            current = current.__cause__
        else:
            current = None if current.__suppress_context__ else current.__context__
    return False


def patience_seconds() -> int:
    return max(0, int(settings.AGENT_OUTAGE_PATIENCE_SECONDS))


def outage_delay(tries: int, retry_after: float | None = None) -> float:
    """The wait before the next try of an outage: exponential from 2 s, jittered, at most
    ``AGENT_OUTAGE_RETRY_MAX_SECONDS`` (at least what the server's Retry-After asks, up to 5 minutes)."""
    cap = max(1.0, float(settings.AGENT_OUTAGE_RETRY_MAX_SECONDS))
    delay = min(cap, 2.0 ** min(tries, 16)) * random.uniform(0.5, 1.0)
    if retry_after is not None:
        delay = max(delay, min(float(retry_after), 300.0))
    return round(delay, 3)
