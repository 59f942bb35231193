"""An empty DEFAULT_FROM_EMAIL, EMAIL_HOST, EMAIL_FILE_PATH, CHANNELS_PREFIX or CACHE_PREFIX means its
default, as the README promises for every variable ("an empty value means the default").

They were read as given: DEFAULT_FROM_EMAIL= (a compose file's ``${DEFAULT_FROM_EMAIL}`` left unset)
made every email's sender "", which Django's SMTP backend refuses (ValueError: Invalid address ""):
every password-reset email and every email the agent sends failed; the prefixes became "", sharing
the keys of any other deployment on the same Redis written the same way.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def settings_value(expression: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = f"import django; django.setup(); from django.conf import settings; print(repr({expression}))"
    environ = {**os.environ, "DEBUG": "1", "DJANGO_SETTINGS_MODULE": "support.settings", **env}
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=environ, capture_output=True, text=True)


@pytest.mark.parametrize(
    ("variable", "expression", "default"),
    [
        ("DEFAULT_FROM_EMAIL", "settings.DEFAULT_FROM_EMAIL", "'support@example.com'"),
        ("EMAIL_HOST", "settings.EMAIL_HOST", "'localhost'"),
        ("EMAIL_FILE_PATH", "settings.EMAIL_FILE_PATH.endswith('mail')", "True"),
        ("CHANNELS_PREFIX", "settings.CHANNELS_PREFIX", "'asgi'"),
        ("CACHE_PREFIX", "settings.CACHES['default']['KEY_PREFIX']", "'support'"),
    ],
)
def test_an_empty_value_means_the_default(variable: str, expression: str, default: str) -> None:
    out = settings_value(expression, **{variable: ""})
    got = out.stdout.strip() or (out.stderr.strip().splitlines() or [""])[-1]
    assert out.returncode == 0 and got == default, f"{variable}= (empty) should mean the default {default}; got {got!r}"


def test_a_password_reset_email_with_an_empty_sender_setting_has_the_default_sender() -> None:
    script = (
        "import django; django.setup()\n"
        "from django.core.mail import EmailMessage\n"
        "from django.core.mail.message import sanitize_address\n"
        "print(sanitize_address(EmailMessage('s', 'b', to=['a@example.test']).from_email, 'utf-8'))"
    )
    environ = {**os.environ, "DEBUG": "1", "DJANGO_SETTINGS_MODULE": "support.settings", "DEFAULT_FROM_EMAIL": ""}
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=environ, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "support@example.com", out.stderr.strip().splitlines()[-1:]
