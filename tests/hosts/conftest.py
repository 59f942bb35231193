"""Fixtures of the many-hosts tests: the network, the product's servers on it, fresh workers per test.

The network and the servers (PostgreSQL, Redis, the payment sandbox, two web servers) are made
once for the package and removed after its last test, so the rest of the suite runs without
them; each test starts the workers and beat it needs and stops them after it, and heals every
partition it made, even when it fails. Without root or iproute2 the tests are skipped
with the reason, except in CI (``CI`` set), where they fail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.hosts.netns import Network, Unavailable, remove_leftovers, unavailable_reason
from tests.hosts.stack import Stack, wait_http


def _not_here(reason: str) -> None:
    """Skip where test hosts cannot be made; in CI, where they must run, fail."""
    if os.environ.get("CI"):
        pytest.fail(f"the many-hosts tests must run in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="package")
def network() -> Iterator[Network]:
    reason = unavailable_reason()
    if reason:
        _not_here(reason)
    remove_leftovers()
    try:
        net = Network()
    except Unavailable as exc:
        _not_here(str(exc))
    try:
        yield net
    finally:
        net.close()


@pytest.fixture(scope="package")
def stack(network: Network, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    built = Stack(network, tmp_path_factory.mktemp("hosts"))
    try:
        built.start_servers()
        built.webs = [built.web(host) for host in built.web_hosts]
        for host, proc in zip(built.web_hosts, built.webs, strict=True):
            wait_http(f"{built.base_url(host)}/healthz", timeout=60, proc=proc)
        yield built
    finally:
        built.close()


@pytest.fixture
def hosts(stack: Stack) -> Iterator[Stack]:
    """The stack, with every worker and beat this test starts stopped after it and every link healed."""
    try:
        yield stack
    finally:
        stack.end_test()
