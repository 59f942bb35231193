"""A help article's page read before a colleague saved it does not write their change back.

The agent answers from the help articles (``search_help``): the refund policy, delivery times. Two
staff opened the same article; Li corrected the refund window in its text and saved; Maria, on the
page she had opened before, fixed a typo in the title and saved: the whole page was written, and
Li's correction was gone without a word (the agent quoted the old window to customers again). As the
other pages of the admin that carry what they showed (``tickets.admin.PageReadForm``): a save writes
what was changed on the page, and a change to text someone changed since is refused, what was typed
shown again.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from tickets.models import HelpArticle

pytestmark = pytest.mark.django_db

OLD = "Refunds are possible within 14 days of delivery."
NEW = "Refunds are possible within 30 days of delivery."


def _admin(name: str) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_superuser(name, f"{name}@example.test", "pw-admin-123"))
    return client


def _page_data(client: Client, article: HelpArticle) -> dict[str, object]:
    page = client.get(reverse("admin:tickets_helparticle_change", args=[article.pk]))
    assert page.status_code == 200
    form = page.context["adminform"].form
    return {name: form[name].value() for name in form.fields if form[name].value() is not None}


@pytest.fixture
def article() -> HelpArticle:
    return HelpArticle.objects.create(slug="refund-policy", title="Refund polcy", body=OLD)


def test_a_title_saved_from_a_page_read_before_a_colleagues_correction_keeps_the_correction(article):
    maria, li = _admin("maria"), _admin("li")
    marias_page = _page_data(maria, article)
    lis_page = _page_data(li, article)

    lis_page["body"] = NEW
    assert li.post(reverse("admin:tickets_helparticle_change", args=[article.pk]), lis_page).status_code == 302
    marias_page["title"] = "Refund policy"
    saved = maria.post(reverse("admin:tickets_helparticle_change", args=[article.pk]), marias_page)

    article.refresh_from_db()
    assert saved.status_code == 302
    assert article.title == "Refund policy"
    assert article.body == NEW, "a page read before li's correction wrote the old refund window back"


def test_text_changed_on_a_page_read_before_a_colleague_changed_it_is_refused_and_shown_again(article):
    maria, li = _admin("maria"), _admin("li")
    marias_page = _page_data(maria, article)
    lis_page = _page_data(li, article)

    lis_page["body"] = NEW
    assert li.post(reverse("admin:tickets_helparticle_change", args=[article.pk]), lis_page).status_code == 302
    marias_page["body"] = OLD + " Shipping is refunded too."
    refused = maria.post(reverse("admin:tickets_helparticle_change", args=[article.pk]), marias_page)

    article.refresh_from_db()
    assert refused.status_code == 200 and article.body == NEW, "maria's stale page wrote over li's correction"
    page = refused.content.decode()
    assert "changed by someone else since this page was opened" in page
    assert "Shipping is refunded too." in page  # what she typed is on the page again


def test_the_same_page_saved_twice_is_no_conflict(article):
    maria = _admin("maria")
    page = _page_data(maria, article)
    page["body"] = NEW

    for _ in range(2):
        assert maria.post(reverse("admin:tickets_helparticle_change", args=[article.pk]), page).status_code == 302

    assert HelpArticle.objects.get(pk=article.pk).body == NEW
