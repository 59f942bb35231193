from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def start_django(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG"}}
    environ.update({"EMBEDDED_DIR": str(tmp_path / "nothing-running"), **env})
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env={**environ, "DJANGO_SETTINGS_MODULE": "support.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DEBUG": "1"}, "DATABASE_URL is not set"),
        (
            {"DATABASE_URL": "mysql://u:p@localhost/db", "REDIS_URL": "redis://x/0", "DEBUG": "1"},
            "must point at PostgreSQL",
        ),
        (
            {"DATABASE_URL": "postgres://u@h/db", "REDIS_URL": "http://nope", "DEBUG": "1"},
            "REDIS_URL must start with redis://",
        ),
        ({"DATABASE_URL": "postgres://u@h/db", "REDIS_URL": "redis://h/0", "DEBUG": "maybe"}, "DEBUG='maybe'"),
        ({"DATABASE_URL": "postgres://u@h/db", "REDIS_URL": "redis://h/0", "DEBUG": "0"}, "SECRET_KEY is not set"),
        (
            {
                "DATABASE_URL": "postgres://u@h/db",
                "REDIS_URL": "redis://h/0",
                "DEBUG": "1",
                "MEDIA_STORAGE_OPTIONS": "{b",
            },
            "MEDIA_STORAGE_OPTIONS is not a JSON object",
        ),
        (
            {
                "DATABASE_URL": "postgres://u@h/db",
                "REDIS_URL": "redis://h/0",
                "DEBUG": "1",
                "MEDIA_STORAGE_OPTIONS": "[]",
            },
            "MEDIA_STORAGE_OPTIONS must be a JSON object",
        ),
        (
            {
                "DATABASE_URL": "postgres://u@h/db",
                "REDIS_URL": "redis://h/0",
                "DEBUG": "1",
                "ATTACHMENT_MAX_BYTES": "10MB",
            },
            "ATTACHMENT_MAX_BYTES='10MB' is not a whole number",
        ),
    ],
)
def test_missing_or_malformed_configuration_fails_at_start_naming_what_to_set(tmp_path, env, message):
    result = start_django(tmp_path, **env)

    assert result.returncode != 0
    assert message in result.stderr


def test_complete_configuration_starts(tmp_path):
    result = start_django(
        tmp_path, DATABASE_URL="postgres://u@h/db", REDIS_URL="redis://h/0", DEBUG="0", SECRET_KEY="s" * 50
    )
    assert result.returncode == 0, result.stderr
