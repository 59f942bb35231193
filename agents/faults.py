"""Named fault points, for crash tests and drills.

``AGENT_FAULT_POINTS`` (environment) lists points at which the worker process
kills itself with SIGKILL, e.g. ``after_step_stored`` or ``mid_stream:3``
(after the third streamed token). With ``AGENT_FAULT_ONCE_DIR`` set, each point
fires once: a marker file records that it fired, so the next worker passes.
Unset in production: ``hit`` is then a dictionary lookup and nothing more.

Points: after_step_stored, after_call_started (a step's call intents are committed),
after_safe_effect (a safe call ran; its outcome waits in memory for the next step),
after_keyed_effect, after_never_effect, after_provider_refund, after_refund_given_up, mid_stream,
before_lease_release.

Faults that break the product on purpose, for drills that must show they catch it
(``armed``): ``skip_idempotency_key`` makes refunds reach the provider under a new key
each time, as a bug that lost the key would.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path


def _configured() -> dict[str, int]:
    points: dict[str, int] = {}
    for item in os.environ.get("AGENT_FAULT_POINTS", "").split(","):
        item = item.strip()
        if not item:
            continue
        name, _, count = item.partition(":")
        points[name] = int(count or 1)
    return points


_POINTS = _configured()
_COUNTS: dict[str, int] = {}


def armed(fault: str) -> bool:
    """Is this deliberate breakage switched on (drills only)?"""
    return fault in _POINTS


def hit(point: str) -> None:
    """Die here, now, with SIGKILL, if this fault point is armed."""
    threshold = _POINTS.get(point)
    if threshold is None:
        return
    _COUNTS[point] = _COUNTS.get(point, 0) + 1
    if _COUNTS[point] < threshold:
        return
    once_dir = os.environ.get("AGENT_FAULT_ONCE_DIR")
    if once_dir:
        marker = Path(once_dir) / f"{point}.fired"
        try:
            marker.touch(exist_ok=False)
        except FileExistsError:
            return
    # Take the whole worker down, not just this pool process: a real crash.
    parent = os.getppid()
    if os.environ.get("AGENT_FAULT_KILL_PARENT") == "1" and parent > 1:
        os.kill(parent, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
