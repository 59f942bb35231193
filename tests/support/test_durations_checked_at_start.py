"""Durations and counts the refund path and the model step compute with are bounded at start.

Each was read as any whole number, and the process started; then:
- REFUND_RECHECK_FAILED_HOURS=2147483648: every refund's check of what the order can still refund
  asked PostgreSQL for now() minus that many hours ("timestamp out of range"), so no refund could be
  made and each ticket asking for one failed its steps until it was parked;
- REFUND_RECONCILE_STALLED_SECONDS=99999999999999999999: a reconcile round that found another holding
  its slot failed on "interval out of range" instead of waiting its turn;
- REFUND_PROVIDER_ATTEMPTS=2147483648: every process stopped at start on a bare "OverflowError: int
  too large to convert to float", naming no variable;
- AGENT_MODEL_STEP_SECONDS=99999999999: every step of a model that does not bound its own calls
  (AGENT_MODEL naming a class of the deployment's own) failed on "OverflowError: timestamp out of
  range for platform time_t" waiting for it, and the tickets were parked;
- OFFLINE_MODEL_TOKEN_DELAY_MS=99999999999999999999: the offline model failed every answer the same way;
- AGENT_OUTAGE_RETRY_MAX_SECONDS=99999999999999999999: the first outage of the model put off the ticket's
  next try by up to that long (a countdown a broker cannot hold, or years), not by the backoff it meant.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def manage_check(**env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "DEBUG": "1", **env}
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("REFUND_RECHECK_FAILED_HOURS", "2147483648"),
        ("REFUND_RECONCILE_STALLED_SECONDS", "99999999999999999999"),
        ("REFUND_PROVIDER_ATTEMPTS", "2147483648"),
        ("AGENT_MODEL_STEP_SECONDS", "99999999999"),
        ("OFFLINE_MODEL_TOKEN_DELAY_MS", "99999999999999999999"),
        ("AGENT_OUTAGE_RETRY_MAX_SECONDS", "99999999999999999999"),
    ],
)
def test_a_duration_past_what_its_use_holds_stops_the_process_at_start_naming_it(name: str, value: str) -> None:
    result = manage_check(**{name: value})
    output = (result.stdout + result.stderr).strip()
    last = output.splitlines()[-1] if output else ""
    assert result.returncode != 0 and "ImproperlyConfigured" in last and name in last, (
        f"{name}={value} was not refused at start naming the variable (exit {result.returncode}: {last!r})"
    )


@pytest.mark.django_db
def test_the_longest_recheck_accepted_still_lets_an_order_be_checked_for_refunds(settings) -> None:
    from agents.selectors import failed_unseen_cents
    from tests.conftest import make_customer, make_order

    settings.REFUND_RECHECK_FAILED_HOURS = settings.REFUND_RECHECK_FAILED_MAX_HOURS
    order = make_order(make_customer())

    assert failed_unseen_cents(order) == 0
