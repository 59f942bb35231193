"""Behind TRUSTED_PROXY_COUNT reverse proxies the login lockout and the per-address limits count per
client, read from X-Forwarded-For. Every request reached Django from the proxy's address, so the
lockout "for one username from one address" was for one username from everywhere (a stranger's five
wrong passwords locked the staff member out from her own address), and the per-address
password-reset limit was one for the whole site. Without the setting X-Forwarded-For is ignored:
a client could write any address there."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from support.client_ip import client_ip
from tests.conftest import make_customer
from tests.support.test_hardening import PASSWORD, _fresh_counters  # noqa: F401 - its lockouts, cleared

PROXY = "10.0.0.1"
pytestmark = pytest.mark.django_db(transaction=True)


def through_the_proxy(forwarded_for: str) -> dict[str, str]:
    return {"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": forwarded_for}


def test_a_strangers_wrong_passwords_do_not_lock_the_staff_member_out_from_her_own_address(settings):  # noqa: ANN001
    settings.TRUSTED_PROXY_COUNT = 1
    settings.AXES_FAILURE_LIMIT = 5
    get_user_model().objects.create_user("maria", password=PASSWORD, is_staff=True)

    stranger = Client()
    for n in range(5):  # writing her address in X-Forwarded-For does not make it hers
        stranger.post(
            "/accounts/login/",
            {"username": "maria", "password": f"guess-{n}"},
            **through_the_proxy("198.51.100.7, 203.0.113.66"),
        )
    assert stranger.post("/accounts/login/", {"username": "maria", "password": PASSWORD},
                         **through_the_proxy("203.0.113.66")).status_code == 429  # fmt: skip

    maria = Client().post(
        "/accounts/login/", {"username": "maria", "password": PASSWORD}, **through_the_proxy("198.51.100.7")
    )
    assert maria.status_code == 302


def test_the_per_address_password_reset_limit_counts_each_client(settings):  # noqa: ANN001
    settings.TRUSTED_PROXY_COUNT = 1
    settings.PASSWORD_RESET_RATE_PER_IP = "2/h"
    customers = [make_customer() for _ in range(4)]

    def ask(customer, address: str) -> int:  # noqa: ANN001
        return (
            Client()
            .post("/accounts/password_reset/", {"email": customer.email}, **through_the_proxy(address))
            .status_code
        )

    assert [ask(c, f"198.51.100.{n + 1}") for n, c in enumerate(customers[:3])] == [302] * 3
    assert [ask(c, "203.0.113.9") for c in customers[1:]] == [302, 302, 429]


@pytest.mark.parametrize(
    ("count", "forwarded_for", "address"),
    [
        (0, "198.51.100.7", PROXY),  # no proxy trusted: the header is the client's word, ignored
        (1, "198.51.100.7", "198.51.100.7"),
        (1, "192.0.2.1, 198.51.100.7", "198.51.100.7"),  # the entry the proxy appended, not the client's
        (2, "192.0.2.1, 198.51.100.7, 10.0.0.2", "198.51.100.7"),
        (2, "198.51.100.7", PROXY),  # fewer entries than proxies: not through them
        (1, "not-an-address", PROXY),
        (1, "", PROXY),
    ],
)
def test_the_client_address_is_read_as_far_as_the_trusted_proxies(rf, settings, count, forwarded_for, address):  # noqa: ANN001
    settings.TRUSTED_PROXY_COUNT = count
    assert client_ip(rf.get("/", **through_the_proxy(forwarded_for))) == address
