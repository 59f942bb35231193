"""The sign-in forms (the site's and the admin's)."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.forms import AdminAuthenticationForm, AdminPasswordChangeForm
from django.contrib.auth import authenticate
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.forms import AuthenticationForm, PasswordChangeForm
from django.core.exceptions import ValidationError
from django.http import HttpRequest


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


class ThrottledPasswordChangeForm(PasswordChangeForm):
    """The current password is checked as a sign-in is (``authenticate`` with the request): django-axes
    counts a wrong one against the same username and address as the sign-in page, and once they are
    locked out refuses even the right one (the page is then its 429). Checked with
    ``check_password`` alone, as Django does, it could be guessed there without limit by anyone holding
    a signed-in browser, and then changed."""

    def __init__(self, user: AbstractBaseUser, *args: Any, request: HttpRequest, **kwargs: Any) -> None:
        super().__init__(user, *args, **kwargs)
        self.request = request

    def clean_old_password(self) -> str:
        old_password = self.cleaned_data["old_password"]
        checked = authenticate(self.request, username=self.user.get_username(), password=old_password)
        if checked is None or checked.pk != self.user.pk:
            raise ValidationError(self.error_messages["password_incorrect"], code="password_incorrect")
        return old_password


class AdminThrottledPasswordChangeForm(ThrottledPasswordChangeForm, AdminPasswordChangeForm):
    pass
