"""The SECRET_KEY written in docker-compose.yml (for trying the product on one's own machine) is
public: anyone can sign sessions and reset links with it. It works in demo mode, where the demo
superuser's password is published anyway; with DEBUG off outside demo mode (DEMO_DATA=0, as the
compose file says to set for real use) the process refuses it at start, naming SECRET_KEY.
"""

from __future__ import annotations

import re

import pytest

from tests.support.test_configuration import ROOT, start_django

BASE = {"DATABASE_URL": "postgres://u@h/db", "REDIS_URL": "redis://h/0", "DEBUG": "0"}


def compose_secret_key() -> str:
    text = (ROOT / "docker-compose.yml").read_text()
    found = re.search(r"SECRET_KEY: \$\{SECRET_KEY:-([^}]+)\}", text)
    assert found, "docker-compose.yml gives SECRET_KEY no default"
    return found.group(1)


def test_the_compose_files_key_is_refused_outside_demo_mode(tmp_path):
    result = start_django(tmp_path, **BASE, DEMO_DATA="0", SECRET_KEY=compose_secret_key())

    assert result.returncode != 0, "the published key started a production process"
    assert "SECRET_KEY" in result.stderr.splitlines()[-1], result.stderr[-600:]
    assert compose_secret_key() not in result.stderr  # the message does not repeat the key


@pytest.mark.parametrize("key", ["django-insecure-" + "x" * 50, "django-insecure-anything"])
def test_a_key_marked_insecure_is_refused_with_debug_off_outside_demo_mode(tmp_path, key):
    result = start_django(tmp_path, **BASE, DEMO_DATA="0", SECRET_KEY=key)

    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr.splitlines()[-1]


def test_the_compose_files_key_still_starts_the_demo(tmp_path):
    result = start_django(tmp_path, **BASE, DEMO_DATA="1", SECRET_KEY=compose_secret_key())

    assert result.returncode == 0, result.stderr[-600:]


def test_a_real_key_starts_in_production(tmp_path):
    result = start_django(tmp_path, **BASE, DEMO_DATA="0", SECRET_KEY="Zq8" * 20)

    assert result.returncode == 0, result.stderr[-600:]
