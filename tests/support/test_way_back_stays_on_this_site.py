"""The way back from a form refused as out of date (``support.views.csrf_failure``) stays on this site.

Its link is the page the form was sent from, read from the Referer when that names this site. A path
of this site that reads as another site's address when it is a link (``//evil.example/...``, or with a
backslash, which browsers read as a slash) made that link lead off the site: a page at such an address
is only the 404 page, but it carries the header's sign-out form, whose refusal linked straight there.
"""

from __future__ import annotations

import pytest
from django.test import Client

from tests.conftest import make_customer

pytestmark = pytest.mark.django_db


def _stale_sign_out(referer: str) -> str:
    customer = make_customer()
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(customer.user)
    page = browser.get("//evil.example/sign-in")
    assert page.status_code == 404 and 'action="/accounts/logout/"' in page.content.decode()
    # Signed in again in another tab: the token the page carries is no longer the browser's.
    response = browser.post("/accounts/logout/", {"csrfmiddlewaretoken": "stale" * 8}, HTTP_REFERER=referer)
    assert response.status_code == 403
    return response.content.decode()


@pytest.mark.parametrize(
    "referer",
    [
        "http://testserver//evil.example/sign-in",
        "http://testserver/\\evil.example/sign-in",
        "http://testserver/\\/evil.example/sign-in",
    ],
)
def test_a_page_whose_path_reads_as_another_sites_address_leads_back_to_the_start(referer):
    page = _stale_sign_out(referer)

    assert 'href="/" id="csrf-failure-back">Back to the start</a>' in page


def test_a_page_of_this_site_still_leads_back_to_itself():
    page = _stale_sign_out("http://testserver/tickets/?q=kettle")

    assert 'href="/tickets/?q=kettle" id="csrf-failure-back">Back to the page</a>' in page
