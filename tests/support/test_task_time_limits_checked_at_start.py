"""Celery's time limits that contradict each other stop the process at start.

- A soft time limit at or past the hard one never fires: a pass is killed outright at the hard limit
  instead of being asked to stop first (and to record its failure and give its ticket back).
- With Redis as the broker, a visibility timeout at or under the task time limit has the broker deliver
  a doorbell again while its first delivery is still legitimately running (the README says to keep it
  above the time limits; it was not checked).

Each was accepted at start without a word.
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
    environ.pop("CELERY_BROKER_URL", None)  # Redis as the broker: the visibility timeout applies
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"CELERY_TASK_SOFT_TIME_LIMIT": "660"}, "CELERY_TASK_SOFT_TIME_LIMIT"),
        ({"CELERY_TASK_SOFT_TIME_LIMIT": "5000", "CELERY_TASK_TIME_LIMIT": "700"}, "CELERY_TASK_SOFT_TIME_LIMIT"),
        ({"CELERY_VISIBILITY_TIMEOUT": "60"}, "CELERY_VISIBILITY_TIMEOUT"),
        ({"CELERY_VISIBILITY_TIMEOUT": "660"}, "CELERY_VISIBILITY_TIMEOUT"),
    ],
)
def test_time_limits_that_contradict_each_other_stop_the_process_at_start(env: dict[str, str], named: str) -> None:
    result = manage_check(**env)
    output = (result.stdout + result.stderr).strip()
    last = output.splitlines()[-1] if output else ""
    assert result.returncode != 0 and "ImproperlyConfigured" in last and named in last, (
        f"{env} was accepted at start (exit {result.returncode}: {last!r})"
    )


def test_limits_in_their_order_still_start() -> None:
    result = manage_check(
        CELERY_TASK_SOFT_TIME_LIMIT="100", CELERY_TASK_TIME_LIMIT="120", CELERY_VISIBILITY_TIMEOUT="121"
    )
    assert result.returncode == 0, (result.stdout + result.stderr).strip().splitlines()[-1:]
