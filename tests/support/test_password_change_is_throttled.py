"""The current password asked on the password-change pages is a sign-in like any other: wrong ones
count towards the same lockout (django-axes, per username and address). Without it, anyone holding a
signed-in browser (a shared computer left signed in, a stolen session cookie) could guess the
password there as fast as the server answers, then change it and take the account for good."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.support.test_hardening import PASSWORD, _fresh_counters  # noqa: F401 - its lockouts, cleared

pytestmark = pytest.mark.django_db(transaction=True)


def change(client: Client, path: str, old: str, new: str = "A-new-password-4711") -> int:
    return client.post(path, {"old_password": old, "new_password1": new, "new_password2": new}).status_code


@pytest.mark.parametrize("path", ["/accounts/password_change/", "/admin/password_change/"])
def test_guessing_the_current_password_is_locked_out_like_a_sign_in(path, settings):
    settings.AXES_FAILURE_LIMIT = 5
    user = get_user_model().objects.create_user("victim", password=PASSWORD, is_staff=True)
    client = Client()
    client.force_login(user)

    wrong = [change(client, path, f"guess-{n}") for n in range(5)]
    locked = client.post(
        path, {"old_password": PASSWORD, "new_password1": "A-new-password-4711", "new_password2": "A-new-password-4711"}
    )

    assert wrong[:4] == [200] * 4  # the form again, with its error
    assert locked.status_code == 429, locked.content.decode()[:300]
    assert "Too many failed sign-in attempts" in locked.content.decode()
    user.refresh_from_db()
    assert user.check_password(PASSWORD)  # the right guess after the limit changed nothing
    # And the sign-in page for that account from that address is locked too: one counter.
    assert Client().post("/accounts/login/", {"username": "victim", "password": PASSWORD}).status_code == 429


def test_the_right_current_password_still_changes_it_and_a_wrong_one_says_so():
    user = get_user_model().objects.create_user("owner", password=PASSWORD)
    client = Client()
    client.force_login(user)

    wrong = client.post(
        "/accounts/password_change/",
        {"old_password": "not-it", "new_password1": "A-new-password-4711", "new_password2": "A-new-password-4711"},
    )
    assert wrong.status_code == 200
    assert "Your old password was entered incorrectly" in wrong.content.decode()
    assert change(client, "/accounts/password_change/", PASSWORD) == 302
    user.refresh_from_db()
    assert user.check_password("A-new-password-4711")
