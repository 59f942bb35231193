"""The sign-in forms (the site's and the admin's)."""

from __future__ import annotations

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm


class UsernameLengthChecked(AuthenticationForm):
    """Django's form sets the username's max_length for the widget only: a longer one was tried,
    and django-axes then stored the failure in its varchar(255) column, a 500. A username no account
    can have is a failed sign-in, said as any other, and counts for nothing."""

    def clean_username(self) -> str:
        username = self.cleaned_data["username"]
        if len(username) > self.fields["username"].max_length:
            raise self.get_invalid_login_error()
        return username


class LoginForm(UsernameLengthChecked):
    pass


class AdminLoginForm(UsernameLengthChecked, AdminAuthenticationForm):
    pass
