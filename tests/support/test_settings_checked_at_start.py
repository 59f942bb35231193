"""Numbers the agent and the money path run on are checked at start, and an empty value means the
default.

README, Configuration: "A missing or malformed value stops the process at start with a message
naming the variable." A zero or negative lease, step limit, token budget, interval of one of beat's
rounds (sweep, reconcile, approval and confirmation expiry), uncertainty delay or connect timeout
would start every process without a word and then do the wrong thing (a lease expired when taken:
two writers on one ticket; no ticket ever answered; beat every 0 s; libpq waiting forever); a model
class that cannot be built would fail every run. Each stops the process at start. EMAIL_BACKEND= and
LOG_LEVEL= (empty) mean their defaults.
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
        ("AGENT_LEASE_SECONDS", "0"),
        ("AGENT_LEASE_SECONDS", "-30"),
        # Past what a timestamp holds: every pass failed taking the lease ("timestamp out of range"),
        # and the sweeper rang the ticket for ever. Past the task's time limit (660 s): a pass that
        # never ends kept its ticket an hour past the limit, when its heartbeat stopped renewing it.
        ("AGENT_LEASE_SECONDS", "1000000000000000"),
        ("AGENT_LEASE_SECONDS", "3600"),
        ("CELERY_TASK_TIME_LIMIT", "10"),  # below the default lease (60 s)
        ("AGENT_MAX_STEPS", "0"),
        ("AGENT_TOKEN_BUDGET", "0"),
        ("AGENT_SWEEP_SECONDS", "0"),
        # Beat's other rounds: every 0 s, beat sent them without pause (1,700 in 4 s), and each
        # customer's doorbell queued behind them.
        ("APPROVAL_EXPIRY_SECONDS", "0"),
        ("AGENT_CONFIRMATION_EXPIRY_SECONDS", "0"),
        # Past what a date holds: every web and worker process started, and beat stopped at its
        # start on "OverflowError: date value out of range", so no sweep ever rang a ticket.
        ("AGENT_SWEEP_SECONDS", "1000000000000"),
        ("REFUND_RECONCILE_SECONDS", "1000000000000"),
        ("REFUND_RECONCILE_SECONDS", "0"),
        ("REFUND_UNCERTAIN_AFTER_SECONDS", "-1"),
        ("DB_CONNECT_TIMEOUT", "0"),
        ("AGENT_MODEL_STEP_SECONDS", "0"),
        ("EMAIL_TIMEOUT", "0"),
        # Past what a wait or a socket's timeout holds (about 9.2e9 s): the process started, then every
        # tool call failed with "OverflowError: timestamp out of range for platform time_t" (the
        # ticket's failures counted, refunds and look-ups never made); a socket refuses such a timeout too.
        ("AGENT_TOOL_TIMEOUT_SECONDS", "1e10"),
        ("EMAIL_TIMEOUT", "1e10"),
        ("AGENT_MODEL", "agents.llm_openai.OpenAIChatModel"),
        ("APPROVAL_POLICY_CURRENCY", "dollars"),
        ("STATE_BUNDLE_KEY", "short-enough-to-guess"),
    ],
)
def test_a_value_out_of_range_stops_the_process_at_start_naming_the_variable(name: str, value: str) -> None:
    result = manage_check(**{name: value})
    output = result.stdout + result.stderr
    assert result.returncode != 0 and name in output, (
        f"{name}={value} was accepted at start (manage.py check exited {result.returncode}: "
        f"{output.strip().splitlines()[-1] if output.strip() else ''!r}); the README promises a malformed "
        "value stops the process naming the variable"
    )


def settings_value(name: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = f"import django; django.setup(); from django.conf import settings; print(repr(settings.{name}))"
    environ = {**os.environ, "DEBUG": "1", "DJANGO_SETTINGS_MODULE": "support.settings", **env}
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=environ, capture_output=True, text=True)


@pytest.mark.parametrize(
    ("variable", "setting", "default"),
    [
        ("EMAIL_BACKEND", "EMAIL_BACKEND", "'django.core.mail.backends.console.EmailBackend'"),
        ("LOG_LEVEL", "LOGGING['root']['level']", "'INFO'"),
        ("EMAIL_TIMEOUT", "EMAIL_TIMEOUT", "10.0"),
    ],
)
def test_an_empty_value_means_the_default(variable: str, setting: str, default: str) -> None:
    out = settings_value(setting, **{variable: ""})
    got = out.stdout.strip() or (out.stderr.strip().splitlines() or [""])[-1]
    assert out.returncode == 0 and got == default, (
        f"{variable}= (empty) should mean the default {default} (README: 'an empty value means the "
        f"default'); got {got!r}"
    )
