"""The failed sign-ins counted per client address count an IPv6 client's whole /64 as one address.

One IPv6 connection comes with a /64 network: 2^64 addresses its owner may send from. The limit per
address (LOGIN_FAILURE_RATE_PER_ADDRESS, against password spraying) counted each address apart, so
one client trying two passwords on each of many accounts from a new address of its /64 each time was
never stopped, where the same client over IPv4 was stopped at the limit. django-ratelimit, which
counts the password-reset requests and the customers' messages per address, already groups IPv6 by
/64 (RATELIMIT_IPV6_MASK); the sign-in limit now counts the same way.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

PASSWORD = "pw-for-tests-123"
LOGIN = "/accounts/login/"
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_counters(settings):
    from django.core.cache import cache

    settings.AXES_FAILURE_LIMIT = 5
    settings.LOGIN_FAILURE_RATE_PER_ADDRESS = "8/h"
    settings.LOGIN_FAILURE_RATE_PER_ACCOUNT = "8/h"
    cache.clear()  # rate-limit windows of earlier tests share the Redis cache
    yield
    cache.clear()


def sign_in(username: str, password: str, *, address: str) -> int:
    return Client(REMOTE_ADDR=address).post(LOGIN, {"username": username, "password": password}).status_code


def test_one_ipv6_client_changing_address_within_its_network_is_stopped_as_one_address():
    user = get_user_model().objects.create_user("maria", password=PASSWORD)

    # Two guesses on each of four accounts, each from another address of one /64.
    tried = [
        sign_in(f"someone-{n}", f"guess-{g}", address=f"2001:db8:1:2::{n:x}{g:x}") for n in range(4) for g in range(2)
    ]
    stopped = sign_in(user.username, PASSWORD, address="2001:db8:1:2::ffff")
    another_network = sign_in(user.username, PASSWORD, address="2001:db8:1:3::1")

    assert tried == [200] * 8  # the form again, with its error
    assert stopped == 429
    assert another_network == 302  # the account is not locked out from elsewhere


def test_ipv4_addresses_are_still_counted_one_by_one():
    user = get_user_model().objects.create_user("maria", password=PASSWORD)

    tried = [sign_in(f"someone-{n}", f"guess-{g}", address=f"10.0.2.{2 * n + g}") for n in range(4) for g in range(2)]
    next_door = sign_in(user.username, PASSWORD, address="10.0.2.200")

    assert tried == [200] * 8
    assert next_door == 302


def test_releasing_one_address_of_the_network_releases_the_networks_count():
    from axes.utils import reset

    user = get_user_model().objects.create_user("maria", password=PASSWORD)
    for n in range(8):
        sign_in(f"someone-{n}", "guess", address=f"2001:db8:1:4::{n + 1:x}")
    assert sign_in(user.username, PASSWORD, address="2001:db8:1:4::100") == 429

    reset(ip="2001:db8:1:4::100")  # what axes_reset_ip does

    assert sign_in(user.username, PASSWORD, address="2001:db8:1:4::100") == 302
