"""A member of staff who may manage accounts in the admin (``auth.change_user``, ``auth.change_group``)
but is no superuser gives no one, themselves included, more than they have themselves.

Django's user page let them tick "Superuser status" on their own account, give themselves any
permission (reconciling refunds with the payment provider, deciding refund approvals) or any group,
set a superuser's password and sign in as them, or delete a superuser's account from the list; the
group page let them add any permission to a group they are in. Now a superuser's account is for a
superuser to change, "Superuser status" is for a superuser to give, and a permission (or a group's)
the giver does not have is refused, naming it; what they have, they give.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.urls import reverse

from staff.permissions import GROUP
from tests.staff.conftest import make_support_staff
from tests.tickets.test_order_page_read_before_a_status_change import _page_as_shown_at

pytestmark = pytest.mark.django_db


def _perm(label: str) -> Permission:
    app, codename = label.split(".")
    return Permission.objects.get(content_type__app_label=app, codename=codename)


def _account_manager() -> tuple[object, Client]:
    """Maria, of the support team, who may also manage accounts and groups."""
    maria = make_support_staff("maria")
    for label in ("auth.view_user", "auth.change_user", "auth.view_group", "auth.change_group"):
        maria.user_permissions.add(_perm(label))
    maria = get_user_model().objects.get(pk=maria.pk)
    client = Client()
    client.force_login(maria)
    return maria, client


def _reread(user: object) -> object:
    return get_user_model().objects.get(pk=user.pk)


def test_an_account_manager_cannot_make_themselves_a_superuser():
    maria, client = _account_manager()
    change = reverse("admin:auth_user_change", args=[maria.pk])
    page = _page_as_shown_at(client, change)
    page["is_superuser"] = "on"

    client.post(change, page)

    assert not _reread(maria).is_superuser, "maria made herself a superuser"


def test_an_account_manager_cannot_give_themselves_a_permission_they_do_not_have():
    maria, client = _account_manager()
    change = reverse("admin:auth_user_change", args=[maria.pk])
    page = _page_as_shown_at(client, change)
    page["user_permissions"] = [*page.get("user_permissions", []), _perm("agents.change_refund").pk]

    answer = client.post(change, page)

    assert not _reread(maria).has_perm("agents.change_refund"), "maria gave herself a permission she lacked"
    assert answer.status_code == 200 and "agents.change_refund" in answer.content.decode()


def test_an_account_manager_cannot_give_a_group_whose_permissions_they_do_not_have():
    maria, client = _account_manager()
    reconcilers = Group.objects.create(name="Refund reconcilers")
    reconcilers.permissions.add(_perm("agents.change_refund"))
    change = reverse("admin:auth_user_change", args=[maria.pk])
    page = _page_as_shown_at(client, change)
    page["groups"] = [*page.get("groups", []), reconcilers.pk]

    answer = client.post(change, page)

    assert not _reread(maria).has_perm("agents.change_refund"), "maria put herself in a group of reconcilers"
    assert answer.status_code == 200 and "agents.change_refund" in answer.content.decode()


def test_an_account_manager_cannot_add_a_permission_they_do_not_have_to_a_group():
    maria, client = _account_manager()
    change = reverse("admin:auth_group_change", args=[Group.objects.get(name=GROUP).pk])
    page = _page_as_shown_at(client, change)
    page["permissions"] = [*page.get("permissions", []), _perm("agents.change_refund").pk]

    answer = client.post(change, page)

    assert not _reread(maria).has_perm("agents.change_refund"), "maria gave her group a permission she lacked"
    assert answer.status_code == 200 and "agents.change_refund" in answer.content.decode()


def test_an_account_manager_cannot_change_a_superusers_account_or_password():
    _, client = _account_manager()
    boss = get_user_model().objects.create_superuser("boss", "boss@example.test", "pw-boss-123")

    password = client.post(
        reverse("admin:auth_user_password_change", args=[boss.pk]),
        {"password1": "taken-over-123", "password2": "taken-over-123", "usable_password": "true"},
    )
    page = client.get(reverse("admin:auth_user_change", args=[boss.pk])).content.decode()

    assert _reread(boss).check_password("pw-boss-123"), "maria set the superuser's password"
    assert password.status_code == 403
    assert 'name="is_active"' not in page, "the superuser's page offers maria their account to change"


def test_an_account_manager_cannot_delete_a_superuser_from_the_list():
    maria, client = _account_manager()
    maria.user_permissions.add(_perm("auth.delete_user"))
    boss = get_user_model().objects.create_superuser("boss", "boss@example.test", "pw-boss-123")

    answer = client.post(
        reverse("admin:auth_user_changelist"),
        {"action": "delete_selected", "_selected_action": [boss.pk], "post": "yes"},
    )

    assert get_user_model().objects.filter(pk=boss.pk).exists(), "maria deleted the superuser's account"
    assert answer.status_code == 403


def test_an_account_manager_still_gives_what_they_have():
    maria, client = _account_manager()
    li = get_user_model().objects.create_user("li", password="pw-li-12345", is_staff=True)
    change = reverse("admin:auth_user_change", args=[li.pk])
    page = _page_as_shown_at(client, change)
    page["groups"] = [Group.objects.get(name=GROUP).pk]
    page["user_permissions"] = [_perm("auth.view_user").pk]

    answer = client.post(change, page)

    assert answer.status_code == 302, answer.content.decode()[:2000]
    li = _reread(li)
    assert li.has_perm("tickets.handle_ticket") and li.has_perm("auth.view_user")
