"""What a pending card tells the person deciding, the confirmation above a level, and the history."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from agents.llm import ModelResponse, ToolCallRequest
from agents.models import Refund, RefundStatus, ToolCall
from agents.runner import advance
from approvals import services
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.approvals.conftest import make_staff
from tests.approvals.test_approvals import refund_ticket
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import AuthorKind

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]
CUSTOMER_ASKS = "Please refund my order {number}, it stopped working"  # what refund_ticket says


def paused(sandbox, number: str, **kwargs):  # noqa: ANN001, ANN003
    ticket, order = refund_ticket(sandbox, number=number, **kwargs)
    advance(ticket.pk)
    return ticket, ApprovalRequest.objects.get(ticket=ticket, status=ApprovalStatus.PENDING)


def ask(customer, body: str):  # noqa: ANN001
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=body)
    return ticket


def dashboard(client: Client) -> str:
    response = client.get("/staff/approvals/")
    assert response.status_code == 200
    return response.content.decode()


def card_html(page: str, approval: ApprovalRequest) -> str:
    start = page.index(f'id="approval-{approval.pk}"')
    ends = [page.find('<li class="card approval"', start + 1), page.find('class="card empty"', start)]
    return page[start : min(end for end in ends if end >= 0)]


def text_of(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def card_text(page: str, approval: ApprovalRequest) -> str:
    return text_of(card_html(page, approval))


def part(page: str, approval: ApprovalRequest, pattern: str) -> str:
    match = re.search(pattern, card_html(page, approval), re.DOTALL)
    assert match, pattern
    return text_of(match.group(1))


class ReasonedRefund:
    """A model that explains itself: a message with the call and a rationale in its arguments."""

    name = "reasoned-refund"

    def __init__(self, order_number: str, *, text: str, reason: str) -> None:
        self.order_number, self.text, self.reason = order_number, text, reason

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        if any(m["role"] == "tool" for m in messages):
            return ModelResponse(text="Done.")
        arguments = f'{{"order_number": "{self.order_number}", "amount_cents": 64900, "reason": "{self.reason}"}}'
        return ModelResponse(text=self.text, tool_calls=[ToolCallRequest("r1", "issue_refund", arguments)])


# --- What the card says ---------------------------------------------------------------------


def test_the_card_states_the_action_as_a_sentence_with_money_in_its_currency(sandbox, client, approver):
    _, approval = paused(sandbox, "E-5001")
    client.force_login(approver)

    card = card_text(dashboard(client), approval)

    assert "Refund $649.00 of order E-5001 to the customer's original payment method" in card
    assert "E-5001: delivered, total $649.00, refunded before this request $0.00" in card
    assert "cents" not in card and "64900" not in card


def test_the_card_links_the_ticket_to_its_staff_page_not_the_admin(sandbox, client, approver):
    ticket, approval = paused(sandbox, "E-5002")
    client.force_login(approver)

    card = card_html(dashboard(client), approval)

    assert f'href="/staff/tickets/{ticket.pk}/"' in card
    assert "/admin/" not in card


def test_the_offline_models_reason_is_the_customers_text_and_is_not_shown_as_the_agents_reasoning(
    sandbox, client, approver
):
    _, approval = paused(sandbox, "E-5003")
    call = ToolCall.objects.get(pk=approval.tool_call_id)
    # The offline model passes the customer's request on as the refund's "reason".
    assert call.arguments["reason"] == CUSTOMER_ASKS.format(number="E-5003")
    client.force_login(approver)

    page = dashboard(client)

    assert approval.agent_reasoning == ""
    reasoning = part(page, approval, r'<dd class="reasoning">(.*?)</dd>')
    assert reasoning == "The agent gave no reasoning."
    assert "it stopped working" in part(page, approval, r'<details class="conversation">(.*?)</details>')


def test_a_request_recorded_with_the_customers_words_as_reasoning_does_not_show_them(sandbox, client, approver):
    _, approval = paused(sandbox, "E-5004")
    # As requests were recorded before the fix: the call's reason (the customer's text) as reasoning.
    ApprovalRequest.objects.filter(pk=approval.pk).update(agent_reasoning=CUSTOMER_ASKS.format(number="E-5004"))
    client.force_login(approver)

    reasoning = part(dashboard(client), approval, r'<dd class="reasoning">(.*?)</dd>')

    assert reasoning == "The agent gave no reasoning."


def test_the_agents_own_message_and_rationale_are_shown_as_its_reasoning(sandbox, client, approver):
    customer = make_customer()
    order = make_order(customer, total_cents=64900, number="E-5005")
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    ticket = ask(customer, "My kettle E-5005 arrived cracked, refund it please")
    model = ReasonedRefund(
        "E-5005",
        text="Delivered nine days ago and reported broken: a full refund is within the 30-day policy.",
        reason="Damaged on arrival",
    )
    advance(ticket.pk, model=model)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    client.force_login(approver)

    reasoning = part(dashboard(client), approval, r'<dd class="reasoning">(.*?)</dd>')

    assert reasoning == (
        "Damaged on arrival Delivered nine days ago and reported broken: a full refund is within the 30-day policy."
    )
    assert "cracked" not in reasoning


def test_a_rationale_quoting_the_customer_is_left_out_and_the_agents_message_kept(sandbox, approver):
    customer = make_customer()
    order = make_order(customer, total_cents=64900, number="E-5006")
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    ticket = ask(customer, "My kettle E-5006 arrived cracked, refund it please")
    model = ReasonedRefund(
        "E-5006", text="The order was delivered and is refundable.", reason="my kettle e-5006 ARRIVED cracked"
    )

    advance(ticket.pk, model=model)

    approval = ApprovalRequest.objects.get(ticket=ticket)
    assert approval.agent_reasoning == "The order was delivered and is refundable."


def test_the_conversation_shows_customer_agent_and_staff_turns_and_the_agents_tool_calls_oldest_first(
    sandbox, client, approver
):
    ticket, approval = paused(sandbox, "E-5007")
    ticket_services.message_post(
        ticket=ticket, author_kind=AuthorKind.STAFF, author_user=approver, body="Checking this one", is_public=False
    )
    client.force_login(approver)

    conversation = part(dashboard(client), approval, r'<details class="conversation">(.*?)</details>')

    customer = conversation.index("Customer: Please refund my order E-5007")
    lookup = conversation.index("Agent: looked up order E-5007")
    refund = conversation.index("Agent: asked to refund $649.00 of order E-5007")
    staff = conversation.index("Staff (approver) (internal note): Checking this one")
    assert customer < lookup < refund < staff
    assert "(waiting for approval)" in conversation[refund:staff]


def test_the_card_shows_the_orders_refund_history(sandbox, client, approver):
    customer = make_customer()
    order = make_order(customer, total_cents=64900, number="E-5008")
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    small = ask(customer, "Please refund $50 of order E-5008, one part was missing")
    for _ in range(3):
        advance(small.pk)
    refund = Refund.objects.get(order=order)
    assert (refund.amount_cents, refund.status) == (5000, RefundStatus.SUCCEEDED)
    big = ask(customer, "The rest is broken too: please refund order E-5008 again")
    advance(big.pk)
    approval = ApprovalRequest.objects.get(ticket=big)
    client.force_login(approver)

    page = dashboard(client)

    history = part(page, approval, r'<section class="refund-history"[^>]*>(.*?)</section>')
    assert "Refunds on order E-5008" in history
    assert f"$50.00 Succeeded {timezone.localtime(refund.created_at):%Y-%m-%d %H:%M:%S %Z} #{small.pk}" in history
    assert "refunded before this request $50.00" in card_text(page, approval)
    assert "Refund $599.00 of order E-5008" in card_text(page, approval)


def test_pending_requests_adding_up_to_more_than_the_order_can_refund_are_flagged_on_each(sandbox, client, approver):
    customer = make_customer()
    order = make_order(customer, total_cents=64900, number="E-5009")
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    first, second = ask(customer, "Please refund order E-5009"), ask(customer, "Refund my order E-5009 please")
    advance(first.pk)
    advance(second.pk)
    one, two = ApprovalRequest.objects.filter(ticket__in=[first, second]).order_by("pk")
    client.force_login(approver)

    page = dashboard(client)

    for approval in (one, two):
        warning = part(page, approval, r'<div data-live="warnings">(.*?)</div>')
        assert "2 pending requests on order E-5009 add up to $1,298.00" in warning
        assert "more than the $649.00 it can still refund" in warning
        assert f"#{one.pk} ($649.00), #{two.pk} ($649.00)" in warning


def test_a_single_request_within_what_the_order_can_refund_has_no_warning(sandbox, client, approver):
    _, approval = paused(sandbox, "E-5010")
    client.force_login(approver)

    assert part(dashboard(client), approval, r'<div data-live="warnings">(.*?)</div>') == ""


# --- Deciding -------------------------------------------------------------------------------


def test_approving_above_the_confirmation_level_without_confirming_is_refused_and_changes_nothing(
    sandbox, client, approver, settings
):
    settings.APPROVAL_CONFIRM_ABOVE_CENTS = 50_000
    _, approval = paused(sandbox, "E-6001")
    client.force_login(approver)
    assert "I confirm a refund of $649.00" in card_text(dashboard(client), approval)

    refused = [
        client.post(f"/staff/approvals/{approval.pk}/decide/", {"decision": "approve"}),
        client.post(f"/staff/approvals/{approval.pk}/decide/", {"decision": "approve", "confirm_amount": "100"}),
    ]

    for response in refused:
        assert response.status_code == 400
        assert "needs a confirmation: tick “I confirm a refund of $649.00”" in response.content.decode()
        assert "Nothing was changed" in response.content.decode()
    approval.refresh_from_db()
    call = ToolCall.objects.get(pk=approval.tool_call_id)
    assert (approval.status, approval.decided_by, call.approval_decision) == (ApprovalStatus.PENDING, None, None)


def test_approving_above_the_confirmation_level_with_the_confirmation_is_recorded(sandbox, client, approver, settings):
    settings.APPROVAL_CONFIRM_ABOVE_CENTS = 50_000
    _, approval = paused(sandbox, "E-6002")
    client.force_login(approver)

    response = client.post(
        f"/staff/approvals/{approval.pk}/decide/", {"decision": "approve", "confirm_amount": "64900"}
    )

    assert response.status_code == 302
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by) == (ApprovalStatus.APPROVED, approver)


def test_approving_at_or_below_the_confirmation_level_needs_no_confirmation(sandbox, client, approver, settings):
    settings.APPROVAL_CONFIRM_ABOVE_CENTS = 64_900  # "above": exactly the level is not above it
    _, approval = paused(sandbox, "E-6003")
    client.force_login(approver)
    assert 'name="confirm_amount"' not in card_html(dashboard(client), approval)

    response = client.post(f"/staff/approvals/{approval.pk}/decide/", {"decision": "approve"})

    assert response.status_code == 302
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED


def test_rejecting_above_the_confirmation_level_needs_no_confirmation(sandbox, client, approver):
    _, approval = paused(sandbox, "E-6004")
    client.force_login(approver)

    response = client.post(f"/staff/approvals/{approval.pk}/decide/", {"decision": "reject", "note": "duplicate"})

    assert response.status_code == 302
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.REJECTED


def test_a_note_given_with_an_approval_is_stored_with_the_decision(sandbox, client, approver):
    _, approval = paused(sandbox, "E-6005")
    client.force_login(approver)
    assert 'name="note"' in card_html(dashboard(client), approval).split('class="approve"')[1].split("</form>")[0]

    client.post(
        f"/staff/approvals/{approval.pk}/decide/",
        {"decision": "approve", "confirm_amount": "64900", "note": "Receipt checked with the warehouse"},
    )

    approval.refresh_from_db()
    call = ToolCall.objects.get(pk=approval.tool_call_id)
    assert (approval.status, approval.note) == (ApprovalStatus.APPROVED, "Receipt checked with the warehouse")
    assert call.approval_note == "Receipt checked with the warehouse"
    history = text_of(client.get("/staff/approvals/history/").content.decode())
    assert "Receipt checked with the warehouse" in history


# --- History --------------------------------------------------------------------------------


@pytest.fixture
def decided(sandbox):  # noqa: ANN001
    """Three decided requests: approved by alice, rejected by bob, expired."""
    alice, bob = make_staff("alice", can_decide=True), make_staff("bob", can_decide=True)
    _, approved = paused(sandbox, "H-1001")
    _, rejected = paused(sandbox, "H-1002")
    _, expired = paused(sandbox, "H-1003")
    services.approval_decide(approval_id=approved.pk, user=alice, approve=True, note="fine")
    services.approval_decide(approval_id=rejected.pk, user=bob, approve=False, note="duplicate request")
    ApprovalRequest.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    services.approvals_expire_due()
    return {"approved": approved, "rejected": rejected, "expired": expired, "alice": alice, "bob": bob}


def history_rows(client: Client, query: str = "") -> tuple[str, list[str]]:
    page = client.get("/staff/approvals/history/" + query).content.decode()
    rows = re.findall(r"<tr><td>(\d+)</td>", page)
    return page, rows


def test_the_history_links_each_ticket_to_its_staff_page_and_names_the_tool_by_its_label(decided, client, approver):
    client.force_login(approver)

    page, rows = history_rows(client)

    assert len(rows) == 3
    for approval in (decided["approved"], decided["rejected"], decided["expired"]):
        assert f'<a href="/staff/tickets/{approval.ticket_id}/">#{approval.ticket_id}</a>' in page
    text = text_of(page)
    assert text.count("Working on your refund $649.00") == 3
    assert "Refund $649.00 of order H-1002 to the customer's original payment method" in text
    assert "issue_refund" not in page
    assert "nobody (it expired)" in text


@pytest.mark.parametrize(
    ("query", "expected", "shown"),
    [
        ("?decision=approved", ["approved"], "Showing approved decisions"),
        ("?decision=rejected", ["rejected"], "Showing rejected decisions"),
        ("?decision=expired", ["expired"], "Showing expired decisions"),
        ("?decider=alice", ["approved"], "Showing all decisions by alice"),
        ("?decider=bob&decision=rejected", ["rejected"], "Showing rejected decisions by bob"),
        ("?decider=bob&decision=approved", [], "Showing approved decisions by bob"),
        ("?decision=bogus&decider=nobody", ["expired", "rejected", "approved"], "Showing all decisions,"),
    ],
)
def test_the_history_filters_by_decision_and_decider_and_shows_the_filter(
    decided, client, approver, query, expected, shown
):
    client.force_login(approver)

    page, rows = history_rows(client, query)

    assert rows == [str(decided[name].pk) for name in expected]
    assert shown in text_of(page)
    params = dict(pair.split("=") for pair in query.lstrip("?").split("&"))
    if params.get("decision") in {"approved", "rejected", "expired"}:
        assert f'<option value="{params["decision"]}" selected>' in page
    if params.get("decider") in {"alice", "bob"}:
        assert f'<option value="{params["decider"]}" selected>' in page
    assert '<option value="alice"' in page and '<option value="bob"' in page  # the deciders to choose from


# --- Who may see it -------------------------------------------------------------------------


def test_anonymous_visitors_are_sent_to_sign_in_from_every_endpoint(sandbox, client):
    _, approval = paused(sandbox, "P-7001")

    for url in ["/staff/approvals/", "/staff/approvals/pending/", "/staff/approvals/history/"]:
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/"), url
    response = client.post(
        f"/staff/approvals/{approval.pk}/decide/", {"decision": "approve", "confirm_amount": "64900"}
    )
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING


def test_staff_without_the_approval_permission_get_403_and_decide_nothing(sandbox, client, plain_staff):
    _, approval = paused(sandbox, "P-7002")
    client.force_login(plain_staff)

    for url in ["/staff/approvals/", "/staff/approvals/pending/", "/staff/approvals/history/?decision=approved"]:
        assert client.get(url).status_code == 403, url
    response = client.post(
        f"/staff/approvals/{approval.pk}/decide/", {"decision": "approve", "confirm_amount": "64900"}
    )
    assert response.status_code == 403
    assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING


def test_many_pending_requests_show_the_oldest_cards_and_count_the_rest(sandbox, client, approver):
    from approvals.selectors import PENDING_SHOWN, WARNING_LISTS

    customer = make_customer()
    order = make_order(customer, total_cents=64900, number="E-5011")
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    asked = PENDING_SHOWN + 5
    for _ in range(asked):
        advance(ask(customer, "Please refund order E-5011, it arrived broken").pk)
    pending = list(ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING).order_by("requested_at", "id"))
    assert len(pending) == asked
    client.force_login(approver)

    page = dashboard(client)

    shown = re.findall(r'<li class="card approval"[^>]*data-approval-id="(\d+)"', page)
    assert [int(pk) for pk in shown] == [a.pk for a in pending[:PENDING_SHOWN]]  # the oldest first
    assert "5 more waiting after these" in text_of(page)
    warning = text_of(part(page, pending[0], r'<div data-live="warnings">(.*?)</div>'))
    assert f"{asked} pending requests on order E-5011 add up to" in warning
    named = ", ".join(f"#{a.pk} ($649.00)" for a in pending[:WARNING_LISTS])
    assert f"Requests: {named} and {asked - WARNING_LISTS} more." in warning


def test_the_dashboard_reads_the_cards_conversations_and_files_in_a_few_queries_whatever_their_number(
    sandbox, client, approver, media
):
    """Each card's conversation and files are its own ticket's, and a page of many cards costs
    the queries of a page of one (they were three queries a card)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.tickets.files import png_bytes, post_with_files
    from tickets.models import Attachment

    def pause_with_a_photo(n: int) -> ApprovalRequest:
        ticket, _ = refund_ticket(sandbox, number=f"Q-510{n}")
        post_with_files(ticket, [(f"photo-{n}.png", png_bytes())], body=f"Here is the damage on Q-510{n}")
        advance(ticket.pk)
        ticket_services.message_post(
            ticket=ticket, author_kind=AuthorKind.STAFF, author_user=approver, body=f"Note {n}", is_public=False
        )
        return ApprovalRequest.objects.get(ticket=ticket, status=ApprovalStatus.PENDING)

    def page_and_queries() -> tuple[str, int]:
        with CaptureQueriesContext(connection) as queries:
            page = dashboard(client)
        return page, len(queries.captured_queries)

    client.force_login(approver)
    approvals = [pause_with_a_photo(1)]
    _, one = page_and_queries()
    approvals += [pause_with_a_photo(n) for n in range(2, 6)]
    page, five = page_and_queries()

    assert five == one
    for n, approval in enumerate(approvals, start=1):
        card = card_html(page, approval)
        conversation = part(page, approval, r'<details class="conversation">(.*?)</details>')
        photo = Attachment.objects.get(original_name=f"photo-{n}.png")
        assert f"Please refund my order Q-510{n}" in conversation
        assert f"Staff (approver) (internal note): Note {n}" in conversation
        assert conversation.count("Customer: ") == 2 and conversation.count("Staff (approver)") == 1
        assert f'alt="photo-{n}.png"' in card and card.count("<img ") == 1
        assert f"/attachments/{photo.pk}/" in card
