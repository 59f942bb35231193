"""Failed sign-ins are limited per address and per account, beside the lockout of one username from
one address: one address trying a few passwords on each of many accounts (password spraying), or
many addresses taking turns on one account, were never stopped, since each pair of username and
address stayed under its own limit."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.conftest import make_customer

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


def sign_in(username: str, password: str, *, address: str, path: str = LOGIN) -> int:
    return Client(REMOTE_ADDR=address).post(path, {"username": username, "password": password}).status_code


@pytest.mark.parametrize("path", [LOGIN, "/admin/login/"])
def test_one_address_trying_many_accounts_is_stopped_even_with_a_right_password(path):
    user = get_user_model().objects.create_user("maria", password=PASSWORD, is_staff=True)

    # Two guesses on each of four accounts: no pair of username and address near its limit of five.
    tried = [sign_in(f"someone-{n}", f"guess-{g}", address="10.0.0.7", path=path) for n in range(4) for g in range(2)]
    stopped = sign_in(user.username, PASSWORD, address="10.0.0.7", path=path)
    elsewhere = sign_in(user.username, PASSWORD, address="10.0.0.8", path=path)

    assert tried == [200] * 8  # the form again, with its error
    assert stopped == 429
    assert elsewhere == 302  # the account is not locked out from its own address


def test_many_addresses_taking_turns_on_one_account_are_stopped():
    customer = make_customer()
    other = make_customer()

    tried = [sign_in(customer.user.username, f"guess-{n}", address=f"10.0.1.{n}") for n in range(8)]
    stopped = sign_in(customer.user.username, PASSWORD, address="10.0.1.200")
    another_account = sign_in(other.user.username, PASSWORD, address="10.0.1.201")

    assert tried == [200] * 8
    assert stopped == 429
    assert another_account == 302


def test_a_few_mistakes_from_one_address_lock_nobody_out():
    customers = [make_customer() for _ in range(3)]

    # A shared office: three customers each mistype once, then sign in.
    for customer in customers:
        assert sign_in(customer.user.username, "typo", address="10.0.2.1") == 200
    signed_in = [sign_in(customer.user.username, PASSWORD, address="10.0.2.1") for customer in customers]

    assert signed_in == [302] * 3


def test_releasing_an_accounts_lockout_lets_it_in_at_once():
    from axes.utils import reset

    customer = make_customer()
    for n in range(8):
        sign_in(customer.user.username, f"guess-{n}", address=f"10.0.3.{n}")
    assert sign_in(customer.user.username, PASSWORD, address="10.0.3.100") == 429

    reset(username=customer.user.username)  # what axes_reset_username does

    assert sign_in(customer.user.username, PASSWORD, address="10.0.3.100") == 302


def test_releasing_an_addresss_lockout_lets_it_in_at_once():
    from axes.utils import reset

    customer = make_customer()
    for n in range(8):
        sign_in(f"someone-{n}", "guess", address="10.0.4.1")
    assert sign_in(customer.user.username, PASSWORD, address="10.0.4.1") == 429

    reset(ip="10.0.4.1")  # what axes_reset_ip does

    assert sign_in(customer.user.username, PASSWORD, address="10.0.4.1") == 302
