"""A customer's admin page names their login, and finds another by typing (an autocomplete), instead of
a drop-down of every login there is: each customer's login, each staff member's, rendered into every
customer's page, so that with many customers the page grew with all of them."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tests.conftest import make_customer

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_customers_page_does_not_list_every_login(admin_client):  # noqa: ANN001
    customer = make_customer("alice")
    get_user_model().objects.bulk_create(
        get_user_model()(username=f"someone-else-{n}", password="!") for n in range(200)
    )

    page = admin_client.get(f"/admin/tickets/customer/{customer.pk}/change/").content.decode()

    assert "alice" in page  # their own login, shown
    assert "someone-else-" not in page


def test_another_login_is_found_by_typing_and_saved(admin_client):  # noqa: ANN001
    customer = make_customer("alice")
    other = get_user_model().objects.create_user(username="alice-new-login", password="pw-for-tests-123")
    url = f"/admin/tickets/customer/{customer.pk}/change/"
    form = admin_client.get(url).context["adminform"].form
    found = admin_client.get(
        "/admin/autocomplete/",
        {"term": "alice-new", "app_label": "tickets", "model_name": "customer", "field_name": "user"},
    ).json()
    assert [r["text"] for r in found["results"]] == ["alice-new-login"]

    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    data.pop("requires_refund_approval", None)
    saved = admin_client.post(url, {**data, "user": found["results"][0]["id"]})

    assert saved.status_code == 302
    customer.refresh_from_db()
    assert customer.user_id == other.pk
