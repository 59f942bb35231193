from __future__ import annotations

from django.contrib.auth import authenticate
from django.test import RequestFactory

from tickets.demo import DEMO_PASSWORD, seed_demo
from tickets.models import Customer, HelpArticle, Order


def test_seed_demo_is_idempotent_and_logins_work(db):
    first = seed_demo()
    counts = (Customer.objects.count(), Order.objects.count(), HelpArticle.objects.count())
    second = seed_demo()

    assert first["customers"] == 3 and first["orders"] >= 5
    assert all(value == 0 for value in second.values())
    assert (Customer.objects.count(), Order.objects.count(), HelpArticle.objects.count()) == counts
    login = RequestFactory().post("/accounts/login/")  # django-axes counts logins per request
    assert authenticate(login, username="staff", password=DEMO_PASSWORD).is_staff
    assert authenticate(login, username="alice", password=DEMO_PASSWORD) is not None


def test_help_articles_are_found_by_full_text_search(db):
    from django.contrib.postgres.search import SearchQuery

    seed_demo()
    hits = HelpArticle.objects.filter(search_vector=SearchQuery("refunds", config="english"))
    assert "refund-policy" in set(hits.values_list("slug", flat=True))
