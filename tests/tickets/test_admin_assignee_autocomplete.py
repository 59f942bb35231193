"""The admin ticket page's assignee autocomplete proposes only people who can work tickets, as the
form accepts only them. It proposed every user matching the search, customers included, whom the
form then refused with "Select a valid choice"."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff

pytestmark = pytest.mark.django_db


def _proposed(admin_client, term: str) -> list[str]:  # noqa: ANN001
    response = admin_client.get(
        "/admin/autocomplete/",
        {"app_label": "tickets", "model_name": "ticket", "field_name": "assignee", "term": term},
    )
    assert response.status_code == 200
    return [row["text"] for row in response.json()["results"]]


def test_the_assignee_autocomplete_proposes_people_who_can_work_tickets_and_no_customer(admin_client):  # noqa: ANN001
    make_customer("zebedee")
    zelda = make_support_staff("zelda")
    zelda.user_permissions.add(Permission.objects.get(codename="handle_ticket"))  # the group and a direct grant
    gone = make_support_staff("zeno")
    gone.is_active = False
    gone.save(update_fields=["is_active"])

    assert _proposed(admin_client, "ze") == ["zelda"]  # once, though granted twice
    assert "admin" in _proposed(admin_client, "adm")  # a superuser can work tickets
