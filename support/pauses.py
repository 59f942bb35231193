"""A service that failed to answer is not asked again for a few seconds, in this process.

Redis (the cache, the live updates, the broker when it is Redis) and a broker that stall (a frozen
server, a host cut off without a reset: connections accepted, nothing comes back) cost each call its
timeout. Every one of these calls is best effort with the ledger behind it: a rate limit left
uncounted, a live update the page reads again from the ledger, a doorbell the sweeper rings. After
one failure, the next calls for ``seconds`` give up at once instead of each waiting out a timeout:
one customer's request waits on a stalled Redis, not every request for as long as it stalls.
"""

from __future__ import annotations

import time

_all: list[Pause] = []


class Pause:
    """``paused()`` is true for ``seconds`` after ``failed()`` (on the monotonic clock, per process)."""

    def __init__(self, what: str, seconds: float) -> None:
        self.what, self.seconds, self.until = what, seconds, 0.0
        _all.append(self)

    def paused(self) -> bool:
        return time.monotonic() < self.until

    def failed(self) -> None:
        self.until = time.monotonic() + self.seconds

    def lift(self) -> None:
        self.until = 0.0


def lift_all() -> None:
    """Every pause over (a test that made a service fail leaves no pause to the next one)."""
    for pause in _all:
        pause.lift()
