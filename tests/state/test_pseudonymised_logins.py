"""Logins in a pseudonymised bundle: a customer's is replaced by their id, nobody else's is touched,
whatever the customers are called."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from agents.models import RunStatus
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from state import bundle
from state.pseudonyms import pseudonym_username
from tests.approvals.conftest import make_staff
from tests.conftest import make_order
from tests.state.conftest import export
from tests.state.test_bundle import empty_the_ledger
from tickets import services as ticket_services
from tickets.models import Customer

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def customer_called(username: str, name: str) -> Customer:
    user = get_user_model().objects.create_user(username=username, password="pw-for-tests-123")
    return Customer.objects.create(user=user, name=name, email=f"{username}@example.test")


def test_an_all_tickets_bundle_restores_when_one_customers_login_is_anothers_first_name(tmp_path):
    sam = customer_called("sam", "Robert Brown")
    jones = customer_called("sjones", "Sam Jones")
    for customer, number in ((sam, "Q-4403"), (jones, "Q-4404")):
        make_order(customer, number=number)
        ticket_services.ticket_open(customer=customer, subject="Where is it", body=f"Where is order {number}?")
    output = tmp_path / "all"
    call_command("export_state", "--all", output=str(output), stdout=io.StringIO())
    users = bundle.decode_rows((output / "parts" / "auth.User.jsonl").read_bytes())
    assert sorted(u["username"] for u in users) == sorted([pseudonym_username(sam.pk), pseudonym_username(jones.pk)])
    empty_the_ledger()

    out = io.StringIO()
    call_command("restore_state", str(output), stdout=out)

    assert "Restored" in out.getvalue()
    restored = {c.pk: c.user.username for c in Customer.objects.select_related("user")}
    assert restored == {sam.pk: pseudonym_username(sam.pk), jones.pk: pseudonym_username(jones.pk)}


def test_a_staff_members_login_is_kept_when_a_customer_has_it_as_a_first_name(tmp_path):
    """The staff member who decided is carried by their own login, so they are matched where restored."""
    customer = customer_called("cust-jones", "Sam Jones")
    customer.requires_refund_approval = True
    customer.save()
    make_order(customer, number="Q-4405", total_cents=4999)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund for Q-4405", body="Please refund order Q-4405, it arrived broken"
    )
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(
        approval_id=approval.pk, user=make_staff("sam", can_decide=True), approve=False, note="Not eligible."
    )

    path = export(tmp_path, ticket)  # pseudonymised: the customer's name, email and login only
    users = bundle.decode_rows((path / "parts" / "auth.User.jsonl").read_bytes())
    approvals = bundle.decode_rows((path / "parts" / "approvals.ApprovalRequest.jsonl").read_bytes())

    assert sorted(u["username"] for u in users) == sorted(["sam", pseudonym_username(customer.pk)])
    assert [a["decided_by"] for a in approvals] == ["sam"]
