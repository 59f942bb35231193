"""The sign-in lockout's cool-off (AXES_COOLOFF_MINUTES) is checked at start.

It was read as any whole number from 0. At 0 django-axes counts only the failures of this very
instant, so nobody was ever locked out: five wrong passwords with AXES_FAILURE_LIMIT=3, then the
right one signed in (302), and the README's throttle was off without a word. Past what a date holds
(2,000,000,000 minutes) every sign-in page post was a 500 (django-axes subtracts the cool-off from
now: "OverflowError: date value out of range"); further still the process stopped with a bare
OverflowError that named no variable.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.test import Client

from tests.conftest import make_customer

ROOT = Path(__file__).resolve().parents[2]


def manage_check(**env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "DEBUG": "1", **env}
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("value", ["0", "2000000000", "99999999999999999999"])
def test_a_cool_off_that_locks_nobody_out_or_fails_every_sign_in_stops_the_process(value: str) -> None:
    result = manage_check(AXES_COOLOFF_MINUTES=value)
    output = (result.stdout + result.stderr).strip()
    last = output.splitlines()[-1] if output else ""
    assert result.returncode != 0 and "ImproperlyConfigured" in last and "AXES_COOLOFF_MINUTES" in last, (
        f"AXES_COOLOFF_MINUTES={value} was not refused at start naming the variable (exit {result.returncode}, "
        f"{last!r})"
    )


@pytest.mark.django_db(transaction=True)
def test_the_longest_cool_off_accepted_still_locks_out_and_answers_every_sign_in(settings) -> None:
    from django.core.cache import cache

    cache.clear()  # the per-address and per-account windows of earlier tests share the Redis cache
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(minutes=django_settings.AXES_COOLOFF_MAX_MINUTES)
    customer = make_customer()

    def sign_in(password: str) -> int:
        return (
            Client(REMOTE_ADDR="10.9.9.9")
            .post("/accounts/login/", {"username": customer.user.username, "password": password})
            .status_code
        )

    tried = [sign_in(f"guess-{n}") for n in range(3)]
    right = sign_in("pw-for-tests-123")
    cache.clear()

    assert tried == [200, 200, 429]
    assert right == 429
