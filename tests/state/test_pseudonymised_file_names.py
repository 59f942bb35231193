"""A pseudonymised bundle changes a customer's file name where it stands as a name, never inside the
agent's own words, its tool names or the keys of its arguments.

A photo named "refund" turned the approval reason into "every file-1 for this customer is reviewed"
and the step's tool call into "issue_file-1": after a restore, the resumed conversation named a tool
that does not exist (README: the agent's and staff's words, and tool names, are kept).
"""

from __future__ import annotations

import pytest

from agents.models import ModelStep, ToolCall
from agents.runner import advance
from tests.conftest import make_customer, make_order
from tests.state.conftest import bundle_bytes, export, verify
from tests.state.test_bundle import empty_the_ledger, restore
from tests.tickets.files import png_bytes
from tickets import services as ticket_services
from tickets.attachments import IncomingFile
from tickets.models import Attachment, TicketEvent

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


@pytest.mark.parametrize("file_name", ["refund", "issue_refund", "order_number", "amount_cents"])
def test_a_file_named_like_the_products_words_changes_none_of_them(tmp_path, sandbox, file_name):  # noqa: ANN001
    customer = make_customer(flagged=True)  # every refund reviewed: the call waits, with its reason
    order = make_order(customer, number="S-1001", total_cents=4999)
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund for S-1001", body="Please refund order S-1001, it arrived broken"
    )
    advance(ticket.pk)
    ticket_services.message_post(
        ticket=ticket,
        author_kind="customer",
        body="A photo of it",
        files=[IncomingFile(name=file_name, data=png_bytes())],
    )
    calls = {s.pk: s.tool_calls for s in ModelStep.objects.filter(ticket=ticket)}
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    payloads = list(TicketEvent.objects.filter(ticket=ticket).order_by("seq").values_list("payload", flat=True))

    path = export(tmp_path, ticket)  # the default: pseudonymised
    assert verify(path)[0] == 0
    empty_the_ledger(restart_keys=False)
    restore(path)

    restored = ToolCall.objects.get(ticket=ticket, name="issue_refund")

    def code(arguments: dict) -> dict:  # the customer's words in "reason" are withheld, as always
        return {k: v for k, v in arguments.items() if k != "reason"}

    assert (restored.approval_reason, code(restored.arguments)) == (call.approval_reason, code(call.arguments))
    named = {s.pk: [c["name"] for c in s.tool_calls] for s in ModelStep.objects.filter(ticket=ticket)}
    assert named == {pk: [c["name"] for c in asked] for pk, asked in calls.items()}
    kept = [p for p in TicketEvent.objects.filter(ticket=ticket).order_by("seq").values_list("payload", flat=True)]
    assert [p.get("label") for p in kept] == [p.get("label") for p in payloads]
    assert Attachment.objects.get(message__ticket=ticket).original_name != file_name


def test_a_file_name_of_its_own_is_changed_where_it_stands(tmp_path):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Damaged parcel", body="See the photo")
    name = "dorothea_passport_2041.png"
    ticket_services.message_post(
        ticket=ticket, author_kind="customer", body="Here", files=[IncomingFile(name=name, data=png_bytes())]
    )
    path = export(tmp_path, ticket)
    text = "".join(p.read_text() for p in (path / "parts").glob("*.jsonl"))
    assert name not in text
    assert verify(path)[0] == 0


@pytest.mark.parametrize(
    "file_name", ["passport.Okonkwo", "scan.07700900123", "Okonkwo"], ids=["a name", "a phone number", "no extension"]
)
def test_a_files_name_leaves_nothing_of_itself_in_a_pseudonymised_bundle_its_extension_included(tmp_path, file_name):  # noqa: ANN001
    """The file's pseudonym kept what followed the last dot of the customer's name for the file, when it was
    letters and digits: "passport.Okonkwo" became "file-1.Okonkwo". It ends in the extension of what the
    file is, as a download of it does."""
    customer = make_customer("okonkwo")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="My documents", body="Here they are")
    ticket_services.message_post(
        ticket=ticket, author_kind="customer", body="A photo", files=[IncomingFile(name=file_name, data=png_bytes())]
    )
    attachment = Attachment.objects.get(message__ticket=ticket)
    assert attachment.original_name == file_name

    path = export(tmp_path, ticket)  # the default: pseudonymised

    data = bundle_bytes(path).decode()
    assert file_name.rsplit(".", 1)[-1] not in data
    assert "okonkwo" not in data.lower()
    assert f'"original_name":"file-{attachment.pk}.png"' in data
