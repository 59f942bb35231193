"""The environment a harness (a benchmark, the drill) and the processes it starts run in."""

from __future__ import annotations

import os


def loopback_settings(*, secret_key: str) -> dict[str, str]:
    """Production settings (DEBUG off) served over plain HTTP, to customers who send far more than a
    person would: the environment of processes a harness or a test of many hosts starts."""
    return {
        "DEBUG": "0",  # DEBUG keeps every query in memory: not what production measures
        "SECRET_KEY": secret_key,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "0",
        "SESSION_COOKIE_SECURE": "0",
        "CSRF_COOKIE_SECURE": "0",
        "SECURE_HSTS_SECONDS": "0",
        "CUSTOMER_MESSAGE_RATE": "100000/s",
        "CUSTOMER_TICKET_RATE": "100000/s",
    }


def configure_loopback_stack(*, secret_key: str, **extra: str) -> None:
    """The environment of a harness (benchmark, drill) and of the processes it starts:
    ``loopback_settings`` on loopback, with no fault armed unless the harness arms one."""
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    defaults = {**loopback_settings(secret_key=secret_key), **extra}
    os.environ["DEBUG"] = defaults.pop("DEBUG")
    for name, value in defaults.items():
        os.environ.setdefault(name, value)
    for name in ("AGENT_FAULT_POINTS", "AGENT_FAULT_ONCE_DIR", "AGENT_FAULT_KILL_PARENT"):
        os.environ.pop(name, None)
