"""The state bundle in-process: what it carries and withholds, restore's refusals, verify's checks."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from agents.models import AgentProfile, AgentRun, CallStatus, ModelStep, Refund, RunStatus, ToolCall
from agents.profiles import active_profile
from agents.refunds import refund_commitments
from agents.runner import advance
from agents.selectors import refunded_total_cents
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from state.export import collect
from state.parts import PARTS, Selection
from state.rows import dump
from support.rows import forget_key_blocks
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer, make_order
from tests.state.conftest import bundle_bytes, export, paused_ticket, rewrite_part, verify, write_manifest
from tickets import services as ticket_services
from tickets.models import Customer, Message, Order, Ticket, TicketEvent

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def restore(path, **options: object) -> str:  # noqa: ANN001
    out = io.StringIO()
    call_command("restore_state", str(path), stdout=out, **options)
    return out.getvalue()


def edited_bundle_pays_nothing(
    path,  # noqa: ANN001
    ticket: Ticket,
    *,
    refused_for: str,
    verify_says: str | tuple[str, ...],
    edited: str,
) -> None:
    """An edited bundle must be reported by ``verify`` (exit 1, with the line or lines ``verify_says``) and
    refused by ``restore`` (its reason naming ``refused_for``) on an empty ledger. Were it restored all the
    same, the ticket is advanced: the agent must pay nothing on it ("a bundle whose ``edited`` passed ...";
    refunds the bundle holds on other tickets are restored with it)."""
    says = (verify_says,) if isinstance(verify_says, str) else verify_says
    status, out = verify(path)
    empty_the_ledger()
    try:
        restore(path)
    except CommandError as refused:
        assert refused_for in str(refused)
        assert status == 1 and all(line in out for line in says), out
        return
    advance(ticket.pk)
    paid = list(Refund.objects.filter(ticket_id=ticket.pk).values_list("amount_cents", "status"))
    assert not paid, f"a bundle whose {edited} passed verify (exit {status}) and restore, and the agent paid it: {paid}"


def ledger_counts() -> dict[str, int]:
    return {part.label: part.model.objects.count() for part in PARTS}


def empty_the_ledger(*, restart_keys: bool = True) -> None:
    """What a fresh database holds of the ledger: nothing (and ids start again at 1, unless
    ``restart_keys`` is false: then the sequences, and the keys this process reserved, stay)."""
    tables = [part.model._meta.db_table for part in PARTS] + [get_user_model()._meta.db_table]
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # checks the test's own pending rows first
        cursor.execute(f"TRUNCATE {', '.join(tables)}{' RESTART IDENTITY' if restart_keys else ''} CASCADE")
    if restart_keys:
        forget_key_blocks()  # the keys this process reserved before name rows no more


def test_without_the_flag_customers_are_pseudonyms_and_their_words_are_withheld(tmp_path):
    ticket, order = paused_ticket("dorothea")
    customer = ticket.customer
    customer.name, customer.email = "Dorothea Quimby", "dorothea.quimby@mail.example"
    customer.save()
    ticket_services.message_post(ticket=ticket, author_kind="customer", body="My address is 12 Larkspur Lane")

    data = bundle_bytes(export(tmp_path, ticket)).decode()

    for personal in ("Dorothea", "Quimby", "dorothea.quimby@mail.example", '"dorothea"', "Larkspur", "arrived broken"):
        assert personal not in data, personal
    assert f"Customer {customer.pk}" in data and f"customer-{customer.pk}@pseudonymised.invalid" in data
    assert f"pseudonymised-customer-{customer.pk}" in data
    assert order.number in data  # orders and amounts are not personal data
    assert "[withheld: the customer's words]" in data


def test_with_the_flag_the_customers_data_is_carried_as_it_is(tmp_path):
    ticket, _ = paused_ticket("dorothea")
    Customer.objects.filter(pk=ticket.customer_id).update(name="Dorothea Quimby", email="dq@mail.example")

    data = bundle_bytes(export(tmp_path, ticket, include_personal_data=True)).decode()

    assert "Dorothea Quimby" in data and "dq@mail.example" in data and '"dorothea"' in data
    assert "arrived broken" in data and "[withheld" not in data


def test_pseudonyms_are_stable_and_a_pseudonymised_database_dumps_to_the_same_rows(tmp_path):
    ticket, _ = paused_ticket()
    first = collect(Selection((ticket.pk,)), personal_data=False)
    again = collect(Selection((ticket.pk,)), personal_data=False)
    assert first.rows == again.rows
    # The rows restored from a pseudonymised bundle are pseudonymised again as they are.
    pseudonymous = first.rows["tickets.Customer"][0]
    Customer.objects.filter(pk=ticket.customer_id).update(name=pseudonymous["name"], email=pseudonymous["email"])
    get_user_model().objects.filter(pk=ticket.customer.user_id).update(username=pseudonymous["user"])
    Message.objects.filter(ticket=ticket, author_kind="customer").update(body="[withheld: the customer's words]")
    assert (
        collect(Selection((ticket.pk,)), personal_data=False).rows["tickets.Customer"] == first.rows["tickets.Customer"]
    )


def test_secrets_are_never_in_the_bundle_only_their_names(tmp_path, settings):
    settings.STRIPE_API_KEY = "sk_test_do-not-ship-4f1c9a"
    settings.SECRET_KEY = "django-secret-do-not-ship-77b2e0"
    settings.OPENAI_API_KEY = "sk-openai-do-not-ship-0c3d51"
    ticket, _ = paused_ticket()
    # A secret that found its way into the ledger (a tool result quoting a configuration error).
    call = ToolCall.objects.filter(ticket=ticket).first()
    call.result = {"error": f"provider said: invalid key {settings.STRIPE_API_KEY}"}
    call.save(update_fields=["result"])
    ticket_services.message_post(
        ticket=ticket, author_kind="staff", body=f"note: {settings.OPENAI_API_KEY}", is_public=False
    )

    for flag in (False, True):
        path = export(tmp_path, ticket, name=f"bundle-{flag}", include_personal_data=flag)
        data = bundle_bytes(path).decode()
        for value in (settings.STRIPE_API_KEY, settings.SECRET_KEY, settings.OPENAI_API_KEY):
            assert value not in data
        manifest = json.loads((path / "manifest.json").read_text())
        assert {"STRIPE_API_KEY", "SECRET_KEY", "OPENAI_API_KEY"} <= set(manifest["secrets"]["not_included"])
        assert set(manifest["secrets"]["withheld_from_rows"]) == {"OPENAI_API_KEY", "STRIPE_API_KEY"}
        assert "[withheld: STRIPE_API_KEY]" in data


def test_two_exports_of_the_same_state_have_the_same_digests_except_the_time(tmp_path):
    ticket, _ = paused_ticket()
    one, two = export(tmp_path, ticket, name="one"), export(tmp_path, ticket, name="two")

    first, second = (json.loads((p / "manifest.json").read_text()) for p in (one, two))
    assert first["parts"] == second["parts"]
    assert first["created_at"] != second["created_at"]
    first.pop("created_at"), second.pop("created_at")
    assert first == second
    for entry in first["parts"]:
        assert (one / entry["file"]).read_bytes() == (two / entry["file"]).read_bytes()


def test_a_bundle_restores_into_an_empty_ledger_row_for_row_with_its_keys_and_sequences_past_them(tmp_path):
    ticket, order = paused_ticket()
    other, _ = paused_ticket(number="S-2002")  # ids beyond the exported ones, gone after the emptying
    before = collect(Selection((ticket.pk,)), personal_data=True)
    keys = sorted(ToolCall.objects.filter(ticket=ticket).values_list("idempotency_key", flat=True))
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()

    out = restore(path)

    assert "Restored" in out
    after = collect(Selection((ticket.pk,)), personal_data=True)
    assert after.rows == before.rows and after.users == before.users
    assert sorted(ToolCall.objects.filter(ticket=ticket).values_list("idempotency_key", flat=True)) == keys
    assert not get_user_model().objects.get(username=ticket.customer.user.username).has_usable_password()
    # New rows take ids after the restored ones.
    fresh, _ = ticket_services.ticket_open(customer=Customer.objects.get(), subject="Another", body="Hello there")
    assert fresh.pk > ticket.pk
    assert ticket_services.message_post(ticket=fresh, author_kind="customer", body="More")[0].pk > max(
        Message.objects.filter(ticket=ticket).values_list("pk", flat=True)
    )
    assert verify(path, database=True)[0] == 0


def test_restore_refuses_rows_already_here_by_default_and_writes_nothing(tmp_path):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket)
    counts = ledger_counts()

    with pytest.raises(CommandError) as refused:
        restore(path)

    assert f"tickets.Ticket {ticket.pk} is already in this database" in str(refused.value)
    assert "Nothing was restored" in str(refused.value)
    assert ledger_counts() == counts


def test_restore_refuses_an_idempotency_key_already_used_by_another_ticket(tmp_path):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    key = ToolCall.objects.get(ticket=ticket, name="issue_refund").idempotency_key
    empty_the_ledger()
    with connection.cursor() as cursor:  # another deployment, whose ids are far from the bundle's
        for part in PARTS:
            if part.model._meta.pk.get_internal_type() in ("AutoField", "BigAutoField"):
                cursor.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), 1000)", [part.model._meta.db_table])
    # ... and one of its tickets holds a call under the same key.
    stranger, _ = paused_ticket("stranger", number="S-9009")
    ToolCall.objects.filter(ticket=stranger, name="issue_refund").update(idempotency_key=key)

    with pytest.raises(CommandError) as refused:
        restore(path, on_conflict="skip")

    assert f"its idempotency_key '{key}' is already used here" in str(refused.value)
    assert not Ticket.objects.filter(pk=ticket.pk).exists()


def test_restore_with_skip_leaves_a_ticket_already_here_and_restores_the_rest(tmp_path):
    kept, _ = paused_ticket()
    gone, _ = paused_ticket(number="S-3003")
    path = export(tmp_path, kept, gone, include_personal_data=True)
    gone_rows = collect(Selection((gone.pk,)), personal_data=True).rows
    for model in (ApprovalRequest, Refund, ToolCall, ModelStep, AgentRun, TicketEvent, Message):
        model.objects.filter(ticket=gone).delete()
    Ticket.objects.filter(pk=gone.pk).delete()
    Ticket.objects.filter(pk=kept.pk).update(subject="Changed here since")

    out = restore(path, on_conflict="skip")

    assert f"Skipped, already here: #{kept.pk}" in out
    assert Ticket.objects.get(pk=kept.pk).subject == "Changed here since"
    assert collect(Selection((gone.pk,)), personal_data=True).rows == gone_rows


@pytest.mark.parametrize("where", ["part", "manifest", "digest", "signature"])
def test_a_bundle_with_one_byte_changed_is_refused_by_restore_and_verify(tmp_path, where):
    ticket, order = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    assert verify(path)[0] == 0
    target = {
        "part": path / "parts" / "tickets.Order.jsonl",
        "manifest": path / "manifest.json",
        "digest": path / "manifest.sha256",
        "signature": path / "manifest.hmac",
    }[where]
    data = bytearray(target.read_bytes())
    at = data.find(order.number.encode()) if where == "part" else len(data) // 2
    data[at + 2] ^= 0x01
    target.write_bytes(bytes(data))
    empty_the_ledger()

    status, out = verify(path)
    failed = "FAILED signature" if where == "signature" else "FAILED checksums and format"
    assert status == 1 and failed in out, out
    with pytest.raises(CommandError, match="cannot be trusted"):
        restore(path)
    assert Ticket.objects.count() == 0


def test_restore_and_verify_refuse_a_format_they_do_not_read(tmp_path):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["format_version"] = 4
    write_manifest(path, manifest)

    assert "this release reads versions 1, 2 and 3" in verify(path)[1]
    with pytest.raises(CommandError, match="format version 4"):
        restore(path)


def test_restore_refuses_a_bundle_written_at_migrations_this_database_lacks(tmp_path):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["migrations"]["agents"].append("9999_from_the_future")
    write_manifest(path, manifest)
    empty_the_ledger()

    with pytest.raises(CommandError, match="agents.9999_from_the_future"):
        restore(path)


def test_verify_reports_the_five_questions_and_passes_on_a_whole_bundle(tmp_path):
    ticket, order = paused_ticket()
    path = export(tmp_path, ticket)

    status, out = verify(path)

    assert status == 0, out
    for heading in ("1. Identity", "2. Knowledge", "3. Permissions", "4. Activity", "5. Verification"):
        assert heading in out
    assert f"#{ticket.pk} pending_approval" in out
    assert "tool issue_refund: replay keyed" in out
    assert "pending approvals: 1" in out and "$49.99" in out
    assert "agent profile versions: v1: 1 run(s)" in out
    assert "Result: OK" in out
    assert verify(path, database=True)[0] == 0


def test_verify_finds_a_gap_in_the_timeline(tmp_path):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket)
    rewrite_part(path, "tickets.TicketEvent", lambda rows: [r for r in rows if r["seq"] != 2])

    status, out = verify(path)

    assert status == 1 and "FAILED gapless timeline" in out and f"ticket #{ticket.pk}" in out


def test_verify_finds_a_refund_paid_without_an_approval_for_its_arguments(tmp_path):
    ticket, order = paused_ticket()
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    # As if the money moved while the request still waited: the ledger a bug would leave.
    Refund.objects.create(
        ticket=ticket, order=order, tool_call=call, idempotency_key=call.idempotency_key,
        amount_cents=4999, currency="usd", status="succeeded", provider_refund_id="re_forged_1",
    )  # fmt: skip
    path = export(tmp_path, ticket)

    status, out = verify(path)
    assert status == 1 and "FAILED no refund paid without an approval" in out
    assert call.idempotency_key in out


def test_verify_finds_two_refunds_under_one_key(tmp_path):
    ticket, order = paused_ticket()
    path = export(tmp_path, ticket)
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    refund = {
        "id": 1, "ticket_id": ticket.pk, "order_id": order.pk, "tool_call_id": call.pk,
        "idempotency_key": call.idempotency_key, "amount_cents": 100, "currency": "usd", "reason": "",
        "status": "failed", "provider_status": "", "escalated_at": None, "told": "", "tells": 0,
        "provider_refund_id": None,
        "attempts": 1, "error": "", "created_at": "2026-01-01T00:00:00+00:00",
        "updated_at": "2026-01-01T00:00:00+00:00",
    }  # fmt: skip
    rewrite_part(path, "agents.Refund", lambda rows: [refund, {**refund, "id": 2}])

    status, out = verify(path)
    assert status == 1 and "FAILED one refund per idempotency key" in out and "2 refunds under the key" in out


def test_verify_against_a_database_that_lost_a_row_or_changed_its_timeline(tmp_path):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket)
    TicketEvent.objects.filter(ticket=ticket, seq=1).update(kind="rewritten")
    Message.objects.filter(ticket=ticket).order_by("-id").first().delete()

    status, out = verify(path, database=True)

    assert status == 1
    assert "FAILED every bundled row is in the database" in out
    assert "FAILED rows that are never changed are as in the bundle" in out


def test_verify_passes_a_restored_timeline_after_the_customer_writes_again(tmp_path):
    """What broke: verify --database dumps the database pseudonymised again, hunting every customer
    message now there in the other rows: a "Thank you" written after the restore rewrote, in that dump,
    a staff reply restored from the bundle ("Thank you for waiting"), and the untouched timeline was
    reported altered."""
    ticket, _ = paused_ticket()
    reply = "Thank you for waiting, I am looking into it."
    ticket_services.staff_reply(
        ticket=ticket, user=make_staff("maria", can_decide=False), body=reply, client_msg_id="r1"
    )
    path = export(tmp_path, ticket)  # the default: pseudonymised
    empty_the_ledger()
    restore(path)

    ticket_services.message_post(ticket=ticket.pk, author_kind="customer", body="Thank you")

    status, out = verify(path, database=True)
    assert status == 0, out
    assert "ok     rows that are never changed are as in the bundle" in out, out


def test_verify_finds_a_refund_paid_on_an_approval_of_other_arguments(tmp_path):
    ticket, order = paused_ticket()
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    ApprovalRequest.objects.filter(tool_call=call).update(status="approved", arguments_digest="0" * 64)
    Refund.objects.create(
        ticket=ticket, order=order, tool_call=call, idempotency_key=call.idempotency_key,
        amount_cents=4999, currency="usd", status="succeeded", provider_refund_id="re_forged_2",
    )  # fmt: skip
    path = export(tmp_path, ticket)

    status, out = verify(path)
    assert status == 1 and "the approval was for other arguments" in out


def test_all_open_only_leaves_out_resolved_tickets_and_an_unknown_ticket_is_an_error(tmp_path):
    open_ticket, _ = paused_ticket()
    done, _ = paused_ticket(number="S-4004")
    Ticket.objects.filter(pk=done.pk).update(status="resolved")

    call_command("export_state", "--all", "--open-only", output=str(tmp_path / "open"), stdout=io.StringIO())

    manifest = json.loads((tmp_path / "open" / "manifest.json").read_text())
    assert manifest["selection"] == {
        "tickets": [open_ticket.pk], "all": True, "open_only": True, "carried_for_refunds": []
    }  # fmt: skip
    assert manifest["counts"]["tickets.Ticket"] == 1
    with pytest.raises(CommandError, match="no ticket #999"):
        call_command("export_state", "--ticket", "999", output=str(tmp_path / "none"), stdout=io.StringIO())


def test_a_constraint_only_the_database_checks_refuses_the_restore_whole(tmp_path):
    ticket, _ = paused_ticket()
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    # A message with no words: refused by a check constraint, which only PostgreSQL checks. (Two events
    # with one number, which this test used, is refused before now, as a gap in the timeline.)
    rewrite_part(path, "tickets.Message", lambda rows: [{**rows[0], "body": ""}, *rows[1:]])

    with pytest.raises(CommandError, match="the database refused the rows"):
        restore(path)
    assert Ticket.objects.count() == 0 and get_user_model().objects.count() == 0


# --- Refunds of an order paid in other tickets --------------------------------------------------


def customer_with_paid_order(sandbox, number: str, total_cents: int) -> tuple[Customer, Order]:  # noqa: ANN001
    customer = make_customer()
    order = make_order(customer, number=number, total_cents=total_cents)
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    return customer, order


def ask(customer: Customer, body: str) -> Ticket:
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="My order", body=body)
    advance(ticket.pk)
    return ticket


def test_a_ticket_restored_alone_keeps_the_refunds_paid_on_its_order_in_an_earlier_ticket(tmp_path, sandbox):
    customer, order = customer_with_paid_order(sandbox, "S-5005", 4999)
    earlier = ask(customer, "Please refund $30 on order S-5005")
    later = ask(customer, "Where is my order S-5005?")
    assert refunded_total_cents(order) == 3000
    refunds = dump(Refund.objects.filter(order=order))
    commitments = refund_commitments(customer_id=customer.pk, order=order)
    path = export(tmp_path, later, include_personal_data=True)
    empty_the_ledger()

    restore(path)

    order = Order.objects.get(pk=order.pk)
    assert dump(Refund.objects.filter(order=order)) == refunds
    assert refunded_total_cents(order) == 3000
    assert refund_commitments(customer_id=customer.pk, order=order) == commitments
    assert Ticket.objects.filter(pk=earlier.pk).exists()
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["selection"]["tickets"] == [later.pk]
    assert manifest["selection"]["carried_for_refunds"] == [earlier.pk]
    assert verify(path, database=True)[0] == 0
    # The restored deployment refuses a refund beyond what remains, before the provider is asked.
    ticket_services.message_post(ticket=later, author_kind="customer", body="Please refund $20 on order S-5005")
    advance(later.pk)
    call = ToolCall.objects.get(ticket=later, name="issue_refund")
    assert call.status == CallStatus.FAILED and "has $19.99 left to refund" in call.error
    assert [r["amount"] for r in sandbox.refunds() if r["payment_intent"] == order.payment_reference] == [3000]


def test_a_ticket_restored_alone_still_needs_an_approval_for_a_refund_staff_declined_in_an_earlier_ticket(
    tmp_path, sandbox
):
    customer, order = customer_with_paid_order(sandbox, "S-6006", 30000)
    earlier = ask(customer, "Please refund $250 on order S-6006")
    approval = ApprovalRequest.objects.get(ticket=earlier)
    approval_services.approval_decide(
        approval_id=approval.pk,
        user=make_staff("approver-here", can_decide=True),
        approve=False,
        note="The order was delivered whole.",
    )
    advance(earlier.pk)
    later = ask(customer, "Where is my order S-6006?")
    path = export(tmp_path, later, include_personal_data=True)
    empty_the_ledger()

    restore(path)

    ticket_services.message_post(ticket=later, author_kind="customer", body="Please refund $50 on order S-6006")
    assert advance(later.pk).state == RunStatus.WAITING_APPROVAL
    call = ToolCall.objects.get(ticket=later, name="issue_refund")
    assert f"staff declined a refund on order S-6006 before (ticket #{earlier.pk})" in call.approval_reason
    assert not [r for r in sandbox.refunds() if r["payment_intent"] == order.payment_reference]


# --- The agent profile versions the runs are pinned to -------------------------------------------


def seed_first_profile_at(pk: int) -> AgentProfile:
    """What a fresh deployment does on first use: version 1 from its settings, its first profile row.

    The id is the bundle's, as in a new database where version 1 is the first row on both sides (the
    tests before this one moved the source's sequence on)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval(pg_get_serial_sequence('agents_agentprofile', 'id'), %s, false)", [pk])
    profile = active_profile()
    assert (profile.pk, profile.version) == (pk, 1)
    return profile


def test_restore_into_a_fresh_deployment_keeps_its_own_first_profile_version_when_only_its_record_differs(
    tmp_path,
):
    ticket, _ = paused_ticket()
    exported = AgentRun.objects.get(ticket=ticket).profile
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    here = seed_first_profile_at(exported.pk)
    # Recorded here at another time, and with an operator of this deployment as its author.
    AgentProfile.objects.filter(pk=here.pk).update(created_by=make_staff("operator-there", can_decide=False))
    assert here.created_at != exported.created_at

    out = restore(path)

    already_here = next(line for line in out.splitlines() if line.startswith("Already here, the same:"))
    assert "agents.AgentProfile 1" in already_here
    assert AgentRun.objects.get(ticket=ticket).profile_id == here.pk
    kept = AgentProfile.objects.get()
    assert kept.created_at == here.created_at and kept.created_by.username == "operator-there" and kept.is_active
    assert ApprovalRequest.objects.filter(ticket=ticket, status="pending").count() == 1
    assert verify(path, database=True)[0] == 0


def test_restore_refuses_a_first_profile_version_here_with_another_prompt_and_writes_nothing(tmp_path, settings):
    ticket, _ = paused_ticket()
    exported = AgentRun.objects.get(ticket=ticket).profile
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    settings.AGENT_SYSTEM_PROMPT = "You answer for another shop."
    seed_first_profile_at(exported.pk)
    counts = ledger_counts()

    with pytest.raises(CommandError) as refused:
        restore(path)

    message = str(refused.value)
    assert "Nothing was restored" in message
    assert f"agents.AgentProfile {exported.pk} is already in this database with other values (system_prompt)" in (
        message
    )
    assert ledger_counts() == counts and not Ticket.objects.exists()
