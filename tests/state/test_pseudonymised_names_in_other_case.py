"""A pseudonymised bundle replaces a customer's name written in another case, whatever its letters.

What broke: the names were matched ignoring case but looked up again by their ``casefold()``, which
does not fold Turkish dotted and dotless i one to one: a staff note "Called YILMAZ" about a customer
named "İlker Yılmaz" made the default export crash with a KeyError.
"""

from __future__ import annotations

import pytest

from tests.state.conftest import bundle_bytes, export, paused_ticket
from tickets import services as ticket_services
from tickets.models import Customer

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


@pytest.mark.parametrize("written", ["YILMAZ", "Yilmaz", "ILKER", "ilker"])
def test_a_name_with_turkish_letters_written_in_another_case_is_pseudonymised(tmp_path, written):  # noqa: ANN001
    ticket, _ = paused_ticket("ilker")
    Customer.objects.filter(pk=ticket.customer_id).update(name="İlker Yılmaz")
    ticket_services.message_post(
        ticket=ticket, author_kind="staff", body=f"Called {written} about the parcel", is_public=False
    )

    data = bundle_bytes(export(tmp_path, ticket)).decode()  # the default: pseudonymised

    assert written not in data
    pseudonyms = (f"Customer {ticket.customer_id}", f"pseudonymised-customer-{ticket.customer_id}")  # name, login
    assert any(f"Called {pseudonym} about the parcel" in data for pseudonym in pseudonyms)
