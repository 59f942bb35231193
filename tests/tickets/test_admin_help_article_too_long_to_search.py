"""A help article the agent's search cannot index (PostgreSQL keeps at most 1 MB of a text's search
words) is refused on its admin page with words that say so, and the text typed is on the page again:
saving it was a database error, which the site answers as "back in a moment" (503, try again), so an
operator pasting a long policy tried again and again, and lost it."""

from __future__ import annotations

import random
import string

import pytest

from agents.tools import search_help
from tickets.models import HelpArticle

pytestmark = pytest.mark.django_db(transaction=True)


def words(count: int) -> str:
    """``count`` different words: each is a search word of its own (about 1.8 MB of them for 150,000)."""
    rnd = random.Random(7)
    return " ".join("".join(rnd.choice(string.ascii_lowercase) for _ in range(8)) for _ in range(count))


def article(body: str, slug: str) -> dict[str, str]:
    return {
        "slug": slug,
        "title": "Returns policy",
        "body": body,
        "updated_at_0": "2026-12-01",
        "updated_at_1": "10:00",
    }


def test_an_article_too_long_to_be_searched_is_refused_with_words_that_say_so(admin_client):  # noqa: ANN001
    body = words(150_000)

    page = admin_client.post("/admin/tickets/helparticle/add/", article(body, "returns"))

    assert page.status_code == 200  # the form again, not an error page
    assert "too long for the search" in page.content.decode()
    assert body[:500] in page.content.decode()  # what was typed is kept
    assert not HelpArticle.objects.exists()


def test_an_article_of_an_ordinary_length_is_saved_and_found_by_the_agents_search(admin_client):  # noqa: ANN001
    body = "You can return an item within 30 days. " + words(2_000)

    page = admin_client.post("/admin/tickets/helparticle/add/", article(body, "returns"))

    assert page.status_code == 302
    found = search_help(None, {"query": "return an item"})  # reads no context
    assert [a["title"] for a in found["articles"]] == ["Returns policy"]


def test_an_article_made_too_long_on_its_page_is_refused_and_keeps_its_text(admin_client):  # noqa: ANN001
    saved = HelpArticle.objects.create(slug="returns", title="Returns policy", body="Return within 30 days.")

    page = admin_client.post(f"/admin/tickets/helparticle/{saved.pk}/change/", article(words(150_000), "returns"))

    assert page.status_code == 200
    assert "too long for the search" in page.content.decode()
    saved.refresh_from_db()
    assert saved.body == "Return within 30 days."
