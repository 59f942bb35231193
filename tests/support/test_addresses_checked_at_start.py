"""Addresses the product reaches (its database, Redis, the broker, the payment provider, the model's
server) and the origins it trusts are checked at start, as every number and boolean is.

README, Configuration: "A missing or malformed value stops the process at start with a message
naming the variable." A port that is not a number, a Redis database that is not one, a database URL
without a database, or an origin without its scheme started every process without a word: the first
request, refund or cache read then failed (a 500 or a 503 the health check blamed on the servers),
or, for an origin, the cross-site check never matched it.
"""

from __future__ import annotations

import pytest

from tests.support.test_configuration import start_django

GOOD = {"DATABASE_URL": "postgres://u@h/db", "REDIS_URL": "redis://h/0", "DEBUG": "1"}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("REDIS_URL", "redis://127.0.0.1:abc/0"),
        ("REDIS_URL", "redis://127.0.0.1:6379/abc"),
        ("REDIS_URL", "redis://127.0.0.1:99999/0"),
        ("CELERY_BROKER_URL", "redis://127.0.0.1:abc/1"),
        ("CELERY_BROKER_URL", "amqp://support@rabbitmq:xx//"),
        ("DATABASE_URL", "postgres://u@127.0.0.1:5432"),
        ("DATABASE_URL", "postgres://u@127.0.0.1:5432/"),
        ("STRIPE_API_BASE", "localhost:12111"),
        ("STRIPE_API_BASE", "sandbox"),
        ("STRIPE_API_BASE", "http://sandbox:port"),
        ("OPENAI_BASE_URL", "api.example.com/v1"),
        ("OPENAI_BASE_URL", "https://:443/v1"),
        ("CSRF_TRUSTED_ORIGINS", "support.example.com"),
        ("CSRF_TRUSTED_ORIGINS", "https://support.example.com,example.org"),
    ],
)
def test_a_malformed_address_stops_the_process_at_start_naming_the_variable(tmp_path, name, value):
    result = start_django(tmp_path, **{**GOOD, name: value})

    assert result.returncode != 0, f"{name}={value!r} started the process"
    assert f"{name}=" in result.stderr.splitlines()[-1], result.stderr[-600:]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("REDIS_URL", "rediss://:secret@redis.example.com:6380/2"),
        ("REDIS_URL", "redis://h"),
        ("CELERY_BROKER_URL", "amqp://support:support@rabbitmq:5672//"),
        ("DATABASE_URL", "postgres://u:p@[::1]:5432/support"),
        ("STRIPE_API_BASE", "https://api.stripe.com"),
        ("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"),
        ("CSRF_TRUSTED_ORIGINS", "https://support.example.com,https://*.example.org,http://localhost:8000"),
    ],
)
def test_a_well_formed_address_starts(tmp_path, name, value):
    result = start_django(tmp_path, **{**GOOD, name: value})

    assert result.returncode == 0, result.stderr[-600:]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("REDIS_URL", "http://:hunter2secret@redis:6379/0"),
        ("REDIS_URL", "redis://:hunter2secret@redis:6379/abc"),
        ("CELERY_BROKER_URL", "ftp://u:hunter2secret@broker/"),
        ("DATABASE_URL", "postgres://u:hunter2secret@db:5432"),
    ],
)
def test_a_refused_address_is_named_without_its_password(tmp_path, name, value):
    """The message goes to the process's log (a container's, a CI run's): the password stays out."""
    result = start_django(tmp_path, **{**GOOD, name: value})

    assert result.returncode != 0
    assert f"{name}" in result.stderr.splitlines()[-1]
    assert "hunter2secret" not in result.stderr
