"""The sign-in, password reset and password change pages answer GET and POST only: Django's form
views took PUT as POST, with an empty form (Django reads a form body for POST only), and answered
200 with the form's errors; the reset page counted it against the address's limit. Any other method
is a 405 that names what is allowed, and does nothing."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client

from tests.conftest import make_customer

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_other_methods_on_the_sign_in_pages_are_405_and_do_nothing(method):
    customer = make_customer()
    customer.user.email = customer.email
    customer.user.save(update_fields=["email"])
    signed_in = Client()
    signed_in.force_login(customer.user)
    forms = [
        (Client(), "/accounts/login/", {"username": customer.user.username, "password": "pw-for-tests-123"}),
        (Client(), "/accounts/password_reset/", {"email": customer.email}),
        (signed_in, "/accounts/password_change/",
         {"old_password": "pw-for-tests-123", "new_password1": "An0ther-pass!", "new_password2": "An0ther-pass!"}),
    ]  # fmt: skip

    for client, path, form in forms:
        response = getattr(client, method)(path, urlencode(form), content_type="application/x-www-form-urlencoded")
        assert response.status_code == 405, (path, response.status_code)
        assert "POST" in response["Allow"]

    assert mail.outbox == []
    assert get_user_model().objects.get(pk=customer.user.pk).check_password("pw-for-tests-123")
