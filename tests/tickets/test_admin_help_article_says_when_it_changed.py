"""A help article edited in the admin says it was updated then: its "updated at" was a field of the
form, left at the time the article was first written unless the operator typed another, so the list
of articles said a policy rewritten today had not changed for a year."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tickets.models import HelpArticle

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_article_edited_in_the_admin_is_dated_by_the_edit(admin_client):  # noqa: ANN001
    a_year_ago = timezone.now() - timedelta(days=365)
    article = HelpArticle.objects.create(slug="returns", title="Returns", body="Within 30 days.", updated_at=a_year_ago)
    url = f"/admin/tickets/helparticle/{article.pk}/change/"
    form = admin_client.get(url).context["adminform"].form
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    if "updated_at" in data:  # a date and a time, as the page sends them
        shown = timezone.localtime(data.pop("updated_at"))
        data.update(updated_at_0=shown.date().isoformat(), updated_at_1=shown.time().isoformat(timespec="seconds"))
    before = timezone.now()

    saved = admin_client.post(url, {**data, "body": "Within 60 days."})

    assert saved.status_code == 302
    article.refresh_from_db()
    assert article.body == "Within 60 days."
    assert article.updated_at >= before
