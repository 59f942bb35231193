"""The staff inbox search with a Unicode digit.

A query of digits is read as a ticket id. ``str.isdigit()`` is true for characters ``int()``
cannot read (superscripts "²", circled "①"), so the inbox checks ``isascii()`` too: such a
query is searched as text and the page answers 200, never a 500.
"""

from __future__ import annotations

import pytest
from django.test import Client

from tests.staff.conftest import make_support_staff

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("query", ["²", "#①", "1²"])
def test_a_search_for_a_unicode_digit_is_answered_not_a_500(query):
    client = Client(raise_request_exception=False)
    client.force_login(make_support_staff("searcher"))

    response = client.get("/staff/", {"q": query})

    assert response.status_code == 200, response.status_code
