"""`docker compose up` with nothing set in the shell or a .env file runs with DEBUG off. The demo
data (customers and the `staff` superuser whose password the README publishes) is then seeded only
when the operator asks for it with DEMO_DATA=1; without it the stack refuses to start until
SECRET_KEY is set, rather than starting with a published key and a published password.
"""

from __future__ import annotations

import re

import yaml

from tests.support.test_configuration import ROOT, start_django

_DEFAULTED = re.compile(r"^\$\{(?P<name>[A-Z_]+):-(?P<default>[^}]*)\}$")


def compose_environment(shell: dict[str, str]) -> dict[str, str]:
    """The app services' environment as Compose resolves it with `shell` as the shell and .env."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    resolved = {}
    for name, value in compose["x-app-environment"].items():
        found = _DEFAULTED.match(str(value))
        if found:
            value = shell.get(found["name"]) or found["default"]
        resolved[name] = str(value)
    return {name: value for name, value in resolved.items() if value != ""}


def settings_under(tmp_path, environ: dict[str, str]) -> tuple[int, str, str]:
    environ = {**environ, "DATABASE_URL": "postgres://u@h/db", "REDIS_URL": "redis://h/0"}
    result = start_django(tmp_path, **environ)
    return result.returncode, result.stdout, result.stderr


def test_compose_with_nothing_set_does_not_start_in_demo_mode(tmp_path):
    environ = compose_environment({})

    assert environ["DEBUG"] == "0"
    assert environ.get("DEMO_DATA", "0") == "0", "compose seeds the published superuser unasked"
    returncode, _, stderr = settings_under(tmp_path, environ)
    assert returncode != 0, "compose started with the published SECRET_KEY"
    assert "SECRET_KEY" in stderr.splitlines()[-1], stderr[-600:]
    assert "DEMO_DATA=1" in stderr.splitlines()[-1], "the refusal does not say how to try the demo"


def test_compose_with_demo_data_asked_for_starts_the_demo(tmp_path):
    environ = compose_environment({"DEMO_DATA": "1"})

    assert environ["DEMO_DATA"] == "1"
    returncode, _, stderr = settings_under(tmp_path, environ)
    assert returncode == 0, stderr[-600:]


def test_compose_with_a_key_of_ones_own_starts_without_demo_data(tmp_path):
    environ = compose_environment({"SECRET_KEY": "Zq8" * 20})

    returncode, _, stderr = settings_under(tmp_path, environ)
    assert returncode == 0, stderr[-600:]
    assert environ.get("DEMO_DATA", "0") == "0"
