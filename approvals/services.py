"""Writes of approvals: requests (inside the agent's pausing transaction), decisions, expiry."""

from __future__ import annotations

import functools
import logging
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from agents.approval import arguments_digest
from agents.calls import call_record_decision
from agents.models import NOT_RUN, AgentProfile, AgentRun, ApprovalDecision, ModelStep, ToolCall
from agents.profiles import active_profile, policy_values, profile_of
from agents.refunds import provider_refunds_outside_the_ledger
from agents.selectors import person_took_the_ticket_since, refunded_total_cents
from agents.tasks import ring
from agents.tools import order_of_customer
from approvals.models import ApprovalRequest, ApprovalStatus
from approvals.selectors import a_person_took_it, agent_words, own_tickets
from support import rounds
from support.clock import database_now
from tickets import realtime, timeline
from tickets import services as ticket_services
from tickets.models import AGENT_STAYS_OUT, ActorKind, AuthorKind, Message, Ticket, TicketEvent

logger = logging.getLogger(__name__)

STAFF_GROUP = "approvals.staff"
DECIDE_PERMISSION = "approvals.decide_approval"


class ApprovalClosed(ValidationError):
    """The request can no longer be decided (already decided, withdrawn, expired, or a person has the
    ticket): nothing was changed. A conflict with the request's state, not bad input."""


def notify_staff(approval_id: int, change: str) -> None:
    """Tell open dashboards to refresh, after commit."""

    message = {"type": "approvals.changed", "approval_id": approval_id, "change": change}
    transaction.on_commit(lambda: realtime.publish(STAFF_GROUP, message))


def _evidence(call: ToolCall) -> tuple[dict[str, Any], int | None, str]:
    if call.name != "issue_refund":
        return {}, None, ""
    customer_id = Ticket.objects.filter(pk=call.ticket_id).values_list("customer_id", flat=True).first()
    order = order_of_customer(customer_id, call.arguments.get("order_number", "")) if customer_id else None
    if order is None:
        return {}, call.arguments.get("amount_cents"), ""
    refunded = refunded_total_cents(order)
    evidence = {
        "order_number": order.number,
        "order_status": order.status,
        "order_total_cents": order.total_cents,
        "refunded_before_cents": refunded,
        "placed_at": order.placed_at.date().isoformat(),
        "delivered_at": order.delivered_at.date().isoformat() if order.delivered_at else None,
    }
    return evidence, int(call.arguments.get("amount_cents", 0)), order.currency


def _tell_dashboards_about(ticket_id: int, change: str, who: str) -> None:
    """Open dashboards read the cards of the ticket's pending requests again (after commit). Best
    effort, as every live update: the change is stored, and the card shows it at the next read."""
    try:
        pending = ApprovalRequest.objects.filter(ticket_id=ticket_id, status=ApprovalStatus.PENDING)
        for approval_id in pending.values_list("pk", flat=True):
            message = {"type": "approvals.changed", "approval_id": approval_id, "change": change}
            realtime.publish(STAFF_GROUP, message)
    except Exception:  # noqa: BLE001 - the change is stored; a live update is never worth failing it
        logger.warning("could not tell the dashboards of %s on ticket %s", who, ticket_id, exc_info=True)


def tell_dashboards_the_customer_wrote(sender: object, ticket_id: int, **kwargs: object) -> None:
    """The customer wrote on a ticket (``tickets.signals.ticket_needs_agent`` from a message, after
    commit): open dashboards read the cards of its pending requests again, which quote what the
    customer wrote after the agent asked ("please cancel the refund"), so the person deciding reads
    it before pressing Approve."""
    _tell_dashboards_about(ticket_id, "customer_wrote", "the customer's message")


def tell_dashboards_a_person_took(sender: object, ticket_id: int, **kwargs: object) -> None:
    """A person took a ticket from the agent (over, or closed it: ``tickets.signals.ticket_taken_from_agent``,
    after commit): its pending requests are no longer offered for a decision (the
    agent withdraws them at its next pass), and the open dashboards say so now, not when a worker
    has passed."""
    _tell_dashboards_about(ticket_id, "person_took", "a person's take-over")


def tell_dashboards_staff_wrote(sender: object, ticket_id: int, **kwargs: object) -> None:
    """A colleague wrote on a ticket (``tickets.signals.ticket_staff_wrote``, after commit): its
    requests' cards quote their notes and replies. A note ("do not refund: the parcel came back
    empty") is how the team tells the person deciding to hold on, and an approval from a card that
    did not show it is refused: the open card shows it now, not after a reload."""
    _tell_dashboards_about(ticket_id, "staff_wrote", "a colleague's note or reply")


PERSON_HAD_IT = "a person had taken the ticket when the agent asked"


def approval_request_create(*, call: ToolCall, reason: str) -> ApprovalRequest:
    """Record the request. Runs inside the agent's pausing transaction (agents.approval.pause_hooks)."""
    earlier = ApprovalRequest.objects.filter(tool_call=call).order_by("-requested_at", "-id").first()
    if earlier is not None and earlier.status == ApprovalStatus.PENDING:
        return earlier
    # An earlier request decided on other arguments stays, with its decision: a fresh one is asked for.
    policy = policy_values(profile_of(call.run))  # the run's pinned profile version
    evidence, amount, currency = _evidence(call)
    step = ModelStep.objects.filter(pk=call.step_id).only("response_text").first()
    # The agent's own words only: a model may pass the customer's request on as the call's reason.
    said = Message.objects.filter(ticket_id=call.ticket_id, author_kind=AuthorKind.CUSTOMER).order_by(
        "created_at", "id"
    )
    reasoning = agent_words(
        [str(call.arguments.get("reason") or ""), step.response_text if step else ""],
        customer_texts=said.values_list("body", flat=True),
    )
    now = database_now()  # its expiry is read by other hosts: on the clock they share
    # A person took the ticket while the model wrote the step: the run is stopped for good (its next pass
    # ends it), so the request is recorded as withdrawn already; no card for staff, no word to the customer.
    held = ticket_services.ticket_hold(call.ticket_id) in AGENT_STAYS_OUT
    approval = ApprovalRequest.objects.create(
        ticket_id=call.ticket_id,
        tool_call=call,
        tool_name=call.name,
        arguments=call.arguments,
        arguments_digest=arguments_digest(call.arguments),
        reason=reason,
        agent_reasoning=reasoning,
        evidence=evidence,
        amount_cents=amount,
        currency=currency,
        requested_at=now,
        expires_at=now + timedelta(hours=policy.ttl_hours),
        **({"status": ApprovalStatus.WITHDRAWN, "decided_at": now, "note": PERSON_HAD_IT} if held else {}),
    )
    label = (
        "Your refund request is under review by our team."
        if call.name == "issue_refund"
        else ("Your request is under review by our team.")
    )
    ticket_services.event_append(
        ticket=call.ticket_id,
        kind="approval_requested",
        actor_kind=ActorKind.AGENT,
        actor_ref=f"run:{call.run_id}",
        payload={
            "approval_id": approval.pk,
            "tool": call.name,
            "reason": reason,
            "label": label,
            **({"asked_before": earlier.pk} if earlier is not None else {}),
        },
        is_public=not held,
    )
    if held:
        return approval
    notify_staff(approval.pk, "requested")
    if evidence.get("order_number"):
        # After the commit, outside the agent's transaction (a request to the provider holds no lock).
        transaction.on_commit(functools.partial(_read_the_provider, approval.pk))
    return approval


def _read_the_provider(approval_id: int) -> None:
    """A refund's card shows the money the payment provider holds refunded on the order's payment outside
    the ledger (made in its dashboard, by another deployment...), read when the request is made: staff
    approving a $300 refund are shown the $300 a colleague refunded there. Written on the request's
    evidence while it waits (``provider``: read or not, how much, which refunds); a decision carries what
    it showed to the call, and the refund is checked against it again next to its payment
    (agents.refunds). A failure leaves the card saying the provider was not read."""
    try:
        approval = ApprovalRequest.objects.select_related("ticket", "tool_call").get(pk=approval_id)
        order = order_of_customer(approval.ticket.customer_id, str(approval.evidence.get("order_number", "")))
        if order is None:
            return
        outside = provider_refunds_outside_the_ledger(order, approval.tool_call.idempotency_key)
        held: dict[str, Any] = {"read": False}
        if outside is not None:
            held = {"read": True, "cents": sum(r.amount_cents for r in outside), "ids": [r.id for r in outside]}
        with transaction.atomic():
            locked = ApprovalRequest.objects.select_for_update().filter(pk=approval_id).first()
            if locked is None or locked.status != ApprovalStatus.PENDING:
                return  # decided meanwhile: its decision carried what its card showed
            locked.evidence = {**locked.evidence, "provider": held}
            locked.save(update_fields=["evidence"])
            notify_staff(approval_id, "provider_read")
    except Exception:  # noqa: BLE001 - the request stands; its card says the provider was not read
        logger.warning("could not read the provider's refunds for approval %s", approval_id, exc_info=True)


def provider_seen(approval: ApprovalRequest, shown: str | None = None) -> list[str] | None:
    """The provider's refunds outside the ledger the deciding card showed, or None (none read): what its
    form sent back (``shown``), never more than the request holds (a card read before the provider was,
    approved after, showed none); without a form (a decision made in code), what the request holds."""
    held = (approval.evidence or {}).get("provider") or {}
    ids = [str(i) for i in held.get("ids", [])] if held.get("read") else None
    if shown is None or ids is None:
        return ids
    if not shown.startswith("read:"):
        return None
    on_card = set(shown.removeprefix("read:").split(","))
    return [i for i in ids if i in on_card]


def register_kinds() -> None:
    """The timeline event kinds of approvals (``tickets.timeline``)."""

    def decided(event: object, payload: dict[str, Any]) -> dict[str, Any]:
        if payload.get("decision") == "approved":
            return {"kind": "notice", "tone": "ok", "text": timeline.label(payload, "Our team approved your request.")}
        text = timeline.label(payload, "Our team could not approve your request.")
        return {"kind": "notice", "tone": "bad", "text": text}

    def add(name: str, description: str, present: timeline.Presenter | None = None) -> None:
        timeline.register(name, app="approvals", description=description, present=present)

    add("approval_requested", "A call waits for a staff decision.",
        timeline.notice("warn", "Your request is under review by our team."))  # fmt: skip
    add("approval_decided", "A member of staff approved or rejected the request.", decided)
    add("approval_expired", "Nobody decided in time.", timeline.notice("bad", "The review of your request expired."))
    add("approval_reminder", "Staff were reminded of a request close to its expiry.")
    add("approval_withdrawn", "The agent's run ended before anyone decided: the request needs no decision.")


def approval_requests_withdraw(*, call_ids: list[int], reason: str) -> int:
    """The agent's run ended with these calls still waiting for staff (a person took the ticket over,
    resolved or closed it): their pending requests leave the dashboard, with the reason. Runs inside
    the agent's transaction that ends the run (agents.calls.withdraw_hooks)."""
    now = timezone.now()
    withdrawn = 0
    for approval in ApprovalRequest.objects.select_for_update().filter(
        tool_call_id__in=call_ids, status=ApprovalStatus.PENDING
    ):
        approval.status, approval.decided_at, approval.note = ApprovalStatus.WITHDRAWN, now, reason[:1000]
        approval.save(update_fields=["status", "decided_at", "note"])
        ticket_services.event_append(
            ticket=approval.ticket_id,
            kind="approval_withdrawn",
            actor_kind=ActorKind.SYSTEM,
            payload={"approval_id": approval.pk, "reason": reason},
        )
        notify_staff(approval.pk, "withdrawn")
        withdrawn += 1
    return withdrawn


# What the card allows (its inputs' maxlength): a note is told to the customer and read by the agent.
DECISION_NOTE_MAX_CHARS = 500


class OwnRequest(PermissionDenied):
    """A member of staff who is also a customer (this login's profile, or one under their email address)
    asked to decide a request on their own ticket: the review the policy asks for is a second person's."""


def can_decide(user: AbstractBaseUser) -> bool:
    return bool(user.is_authenticated and user.is_active and user.has_perm(DECIDE_PERMISSION))


def customer_wrote_after(*, ticket_id: int, seq: int) -> bool:
    """Has the customer written on this ticket after its timeline's number ``seq``?"""
    return TicketEvent.objects.filter(
        ticket_id=ticket_id, seq__gt=seq, kind="message", actor_kind=ActorKind.CUSTOMER, is_public=True
    ).exists()


def colleague_noted_after(*, ticket_id: int, seq: int, user: AbstractBaseUser) -> str:
    """Who (a colleague of ``user``) wrote an internal note on this ticket after its timeline's number
    ``seq`` ('' if nobody did): the card shows the ticket's notes, and a note is how the team tells the
    person deciding to hold on ("do not refund: the parcel came back empty")."""
    note = (
        TicketEvent.objects.filter(
            ticket_id=ticket_id, seq__gt=seq, kind="message", actor_kind=ActorKind.STAFF, is_public=False
        )
        .exclude(actor_user=user)
        .select_related("actor_user")
        .order_by("-seq")
        .first()
    )
    return "" if note is None else ticket_services.staff_name(note.actor_user)


def approval_decide(
    *,
    approval_id: int,
    user: AbstractBaseUser,
    approve: bool,
    note: str = "",
    now: datetime | None = None,
    seen_seq: int | None = None,
    provider_shown: str | None = None,
) -> ApprovalRequest:
    """Record a staff decision and ring the ticket. The first decision wins; later ones change nothing.
    ``seen_seq``: the ticket's timeline number the deciding page was read at; an approval is refused
    when the customer wrote after it (the approved call runs on resume before the agent reads it).
    ``provider_shown``: what the deciding card showed of the payment provider's refunds outside the
    ledger (``ApprovalCard.provider_seen``); the decision keeps it (``provider_seen``)."""
    if not can_decide(user):
        raise PermissionDenied("You do not have permission to decide approvals.")
    note = (note or "").strip()
    if len(note) > DECISION_NOTE_MAX_CHARS:
        raise ValidationError(
            f"A decision's note can be at most {DECISION_NOTE_MAX_CHARS} characters (this one has {len(note)}); "
            "nothing was decided.",
            code="note_too_long",
        )
    now = now or database_now()
    with transaction.atomic():
        # No join here: a row re-read after waiting for the lock would come with the join as it was.
        approval = ApprovalRequest.objects.select_for_update().get(pk=approval_id)
        if own_tickets(user=user, ticket_ids=[approval.ticket_id]):
            raise OwnRequest("This request is on your own ticket: a colleague decides it. Nothing was changed.")
        wanted = ApprovalStatus.APPROVED if approve else ApprovalStatus.REJECTED
        if approval.status == wanted and approval.decided_by_id == user.pk:
            # The same decision sent again (a retried POST): the original result, while it stands;
            # once the run ended with the call unrun, that is said, as for a first decision.
            if ToolCall.objects.filter(pk=approval.tool_call_id, error__startswith=NOT_RUN).exists():
                raise ApprovalClosed(
                    "The agent no longer waits for this decision (its run ended); nothing was changed.",
                    code="withdrawn",
                )
            return approval
        if approval.status != ApprovalStatus.PENDING:
            when = timezone.localtime(approval.decided_at).strftime("%Y-%m-%d %H:%M %Z") if approval.decided_at else ""
            if approval.status == ApprovalStatus.WITHDRAWN:
                raise ApprovalClosed(
                    f"This request was withdrawn {when}: the agent stopped waiting for it ({approval.note}); "
                    "nothing was changed.".replace("  ", " "),
                    code="already_decided",
                )
            who = approval.decided_by.get_username() if approval.decided_by else "the system"
            raise ApprovalClosed(
                f"This request was already {approval.status} by {who} {when}; nothing was changed.".replace("  ", " "),
                code="already_decided",
            )
        if approval.expires_at <= now:
            raise ApprovalClosed("This request has expired; nothing was changed.", code="expired")
        # Asked once the request is known to be open: on one decided meanwhile, the reason could never
        # be used, and asking for it hid that a colleague had decided.
        if not approve and not note:
            raise ValidationError("Please say why the request is rejected; the customer will be told.", code="no_note")
        approval.status = wanted
        approval.decided_by = user
        approval.decided_at = now
        approval.note = note
        approval.save(update_fields=["status", "decided_by", "decided_at", "note"])
        recorded = call_record_decision(
            call_id=approval.tool_call_id,
            decision=approval.status,
            note=note,
            digest=approval.arguments_digest,
            provider_seen=provider_seen(approval, provider_shown),
            order_number=str((approval.evidence or {}).get("order_number") or ""),
        )
        if not recorded:
            # The call no longer waits for this decision (its run ended meanwhile): a card that says
            # "approved" over a call that carries no approval would tell staff something untrue.
            raise ApprovalClosed(
                "The agent no longer waits for this decision (its run ended); nothing was changed.", code="withdrawn"
            )
        # Who has the ticket, read while holding its row (the locks in the order the agent takes them:
        # request, call, ticket): a take-over in flight lands first and is seen, or waits for this
        # decision. A refusal here rolls the decision back.
        ticket_services.ticket_hold(approval.ticket_id)
        if person_took_the_ticket_since(AgentRun(pk=approval.tool_call.run_id, ticket_id=approval.ticket_id)):
            raise ApprovalClosed(
                f"A person has had ticket #{approval.ticket_id} since the agent asked (taken over, resolved or "
                "closed): the agent will not act on this request; nothing was changed.",
                code="person_has_ticket",
            )
        if approve and seen_seq is not None and customer_wrote_after(ticket_id=approval.ticket_id, seq=seen_seq):
            raise ApprovalClosed(
                f"The customer wrote on ticket #{approval.ticket_id} since this page was read: read their "
                "message on the card and decide again; nothing was changed.",
                code="customer_wrote",
            )
        # A colleague's internal note the card did not show ("do not refund"): read before approving, as the
        # customer's words are (a note takes nothing from the agent, so nothing else would stop the refund).
        noted_by = (
            colleague_noted_after(ticket_id=approval.ticket_id, seq=seen_seq, user=user)
            if approve and seen_seq is not None
            else ""
        )
        if noted_by:
            raise ApprovalClosed(
                f"{noted_by} wrote an internal note on ticket #{approval.ticket_id} since this page was read: read "
                "it on the card and decide again; nothing was changed.",
                code="colleague_noted",
            )
        label = (
            "Our team approved your request; finishing it now."
            if approve
            else "Our team reviewed your request and could not approve it."
        )
        ticket_services.event_append(
            ticket=approval.ticket_id,
            kind="approval_decided",
            actor_kind=ActorKind.STAFF,
            actor_user=user,
            # The call's id: the agent reads from this event on whether the customer wrote after it.
            payload={
                "approval_id": approval.pk,
                "call_id": approval.tool_call_id,
                "decision": approval.status,
                "note": note,
                "label": label,
            },
            is_public=True,
        )
        ring(approval.ticket_id)
        notify_staff(approval.pk, approval.status)
    return approval


class _PersonHasIt(Exception):
    def __init__(self, ticket_id: int) -> None:
        super().__init__(ticket_id)
        self.ticket_id = ticket_id


def _expired(approval: ApprovalRequest) -> None:
    """What an expiry tells: the customer (on the timeline), the ticket's workers (a ring) and staff."""
    ticket_services.event_append(
        ticket=approval.ticket_id,
        kind="approval_expired",
        actor_kind=ActorKind.SYSTEM,
        payload={"approval_id": approval.pk, "label": "We could not review your request in time."},
        is_public=True,
    )
    ring(approval.ticket_id)
    notify_staff(approval.pk, "expired")


def _due_for_a_reminder(now: datetime) -> list[ApprovalRequest]:
    """The waiting requests not yet reminded (and whose ticket no person took) that expire within the
    reminder time of the agent profile version their run is pinned to (a version made active since does
    not change when staff hear of a request it did not ask for)."""
    # Not of a request whose ticket a person took: the dashboard no longer offers it, and the run's end
    # withdraws it (a reminder on the timeline of a ticket a person holds would say staff were asked).
    waiting = ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING, reminder_sent_at__isnull=True).exclude(
        a_person_took_it()
    )
    due = ApprovalRequest.objects.none()
    for profile_id in waiting.values_list("tool_call__run__profile_id", flat=True).distinct().order_by():
        # A run started before profiles existed is pinned to the active version when it next runs.
        profile = AgentProfile.objects.get(pk=profile_id) if profile_id is not None else active_profile()
        remind_from = now + timedelta(hours=policy_values(profile).reminder_before_hours)
        due |= waiting.filter(tool_call__run__profile_id=profile_id, expires_at__lte=remind_from)
    return list(due.order_by("pk"))


def approvals_expire_due(*, now: datetime | None = None) -> dict[str, int]:
    """Expire overdue requests (the ticket then goes to a person) and remind staff of those close to it."""
    now = now or database_now()
    expired = reminded = 0
    due = (
        ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING, expires_at__lte=now)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    isolated = rounds.Round("approval expiry")
    for approval_id in list(due):
        with isolated.row(f"approval {approval_id}"):
            try:
                with transaction.atomic():
                    approval = ApprovalRequest.objects.select_for_update().get(pk=approval_id)
                    if approval.status != ApprovalStatus.PENDING:
                        continue
                    approval.status = ApprovalStatus.EXPIRED
                    approval.decided_at = now
                    approval.save(update_fields=["status", "decided_at"])
                    call_record_decision(call_id=approval.tool_call_id, decision=ApprovalDecision.EXPIRED)
                    # As a decision: after a person took the ticket, the request is theirs to close (the
                    # run's end withdraws it); an expiry written over a take-over would tell the customer
                    # "we could not review it" on a ticket a person holds. (Locks in the decision's order:
                    # request, call, ticket; a take-over in flight lands first and is seen.)
                    ticket_services.ticket_hold(approval.ticket_id)
                    if person_took_the_ticket_since(
                        AgentRun(pk=approval.tool_call.run_id, ticket_id=approval.ticket_id)
                    ):
                        raise _PersonHasIt(approval.ticket_id)
                    _expired(approval)
                    expired += 1
            except _PersonHasIt as taken:
                ring(taken.ticket_id)  # the pass that ends the run withdraws the request
    for approval in _due_for_a_reminder(now):
        with isolated.row(f"the reminder of approval {approval.pk}"), transaction.atomic():
            updated = ApprovalRequest.objects.filter(pk=approval.pk, reminder_sent_at__isnull=True).update(
                reminder_sent_at=now
            )
            if not updated:
                continue
            ticket_services.event_append(
                ticket=approval.ticket_id,
                kind="approval_reminder",
                actor_kind=ActorKind.SYSTEM,
                payload={"approval_id": approval.pk, "expires_at": approval.expires_at.isoformat()},
            )
            notify_staff(approval.pk, "reminder")
            reminded += 1
    return {"expired": expired, "reminded": reminded, **({"errors": isolated.failed} if isolated.failed else {})}
