"""The ledger: customers, orders, tickets, messages and the ticket timeline.

Every durable record of the product hangs off a ticket in this database. Rows
are written only through ``tickets.services``.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.core.exceptions import ValidationError
from django.db import OperationalError, connection, models, transaction
from django.db.models import Q
from django.utils import timezone


class Customer(models.Model):
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="customer")
    name = models.CharField(max_length=200)
    email = models.EmailField(unique=True)
    # Every refund for a flagged customer needs a staff approval (approvals app).
    requires_refund_approval = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"


class OrderStatus(models.TextChoices):
    PENDING = "pending", "Pending payment"
    PAID = "paid", "Paid"
    SHIPPED = "shipped", "Shipped"
    DELIVERED = "delivered", "Delivered"
    CANCELLED = "cancelled", "Cancelled"
    REFUNDED = "refunded", "Refunded"


# Orders in these states can be refunded (up to what remains refundable).
REFUNDABLE_ORDER_STATUSES = frozenset({OrderStatus.PAID, OrderStatus.SHIPPED, OrderStatus.DELIVERED})


class Order(models.Model):
    customer = models.ForeignKey(Customer, on_delete=models.PROTECT, related_name="orders")
    number = models.CharField(max_length=32, unique=True)
    status = models.CharField(max_length=16, choices=OrderStatus.choices, default=OrderStatus.PAID)
    currency = models.CharField(max_length=3, default="usd")
    # Amounts are in the currency's minor unit (cents), as the payment provider counts them.
    total_cents = models.PositiveIntegerField()
    payment_reference = models.CharField(max_length=100, blank=True, help_text="The provider's payment id")
    placed_at = models.DateTimeField(default=timezone.now)
    shipped_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-placed_at"]
        constraints = [
            models.CheckConstraint(condition=Q(total_cents__gt=0), name="order_total_positive"),
            models.CheckConstraint(condition=Q(currency__regex=r"^[a-z]{3}$"), name="order_currency_iso_lower"),
        ]

    def __str__(self) -> str:
        return self.number

    @property
    def total(self) -> Decimal:
        return Decimal(self.total_cents) / 100


class OrderLine(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="lines")
    sku = models.CharField(max_length=64)
    description = models.CharField(max_length=200)
    quantity = models.PositiveIntegerField()
    unit_price_cents = models.PositiveIntegerField()

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(quantity__gt=0), name="order_line_quantity_positive")]

    def __str__(self) -> str:
        return f"{self.quantity} x {self.description}"


class TicketStatus(models.TextChoices):
    OPEN = "open", "Open"
    WAITING_ON_CUSTOMER = "waiting_on_customer", "Waiting on customer"
    PENDING_APPROVAL = "pending_approval", "Pending approval"
    WITH_HUMAN = "with_human", "With a person"
    RESOLVED = "resolved", "Resolved"
    CLOSED = "closed", "Closed"


# The one place that says which status changes are allowed.
TICKET_TRANSITIONS: dict[str, frozenset[str]] = {
    TicketStatus.OPEN: frozenset(
        {TicketStatus.WAITING_ON_CUSTOMER, TicketStatus.PENDING_APPROVAL, TicketStatus.WITH_HUMAN,
         TicketStatus.RESOLVED, TicketStatus.CLOSED}
    ),
    # A turn answering a message sent mid-answer can pause after the earlier reply set this status.
    TicketStatus.WAITING_ON_CUSTOMER: frozenset(
        {TicketStatus.OPEN, TicketStatus.PENDING_APPROVAL, TicketStatus.WITH_HUMAN, TicketStatus.RESOLVED,
         TicketStatus.CLOSED}
    ),
    TicketStatus.PENDING_APPROVAL: frozenset({TicketStatus.OPEN, TicketStatus.WITH_HUMAN, TicketStatus.CLOSED}),
    TicketStatus.WITH_HUMAN: frozenset({TicketStatus.OPEN, TicketStatus.RESOLVED, TicketStatus.CLOSED}),
    TicketStatus.RESOLVED: frozenset({TicketStatus.OPEN, TicketStatus.CLOSED}),
    TicketStatus.CLOSED: frozenset(),
}  # fmt: skip

# The permission the staff inbox asks for (the "Support staff" group has it: staff.permissions).
HANDLE_PERMISSION = "tickets.handle_ticket"


def can_work_tickets() -> Q:
    """Who may hold a ticket: active, with ``tickets.handle_ticket`` (the support staff group or a
    direct grant), or a superuser. A ticket's assignee is one (the admin's autocomplete proposes
    only them); one condition, not joins, so nobody is listed twice."""
    app_label, codename = HANDLE_PERMISSION.split(".")
    granted = Q(groups__permissions__codename=codename, groups__permissions__content_type__app_label=app_label) | Q(
        user_permissions__codename=codename, user_permissions__content_type__app_label=app_label
    )
    people = get_user_model().objects.filter(Q(is_active=True) & (granted | Q(is_superuser=True)))
    return Q(pk__in=people.values("pk"))


# A person has the ticket, resolved it or closed it: the agent neither starts nor finishes a turn on it,
# and nothing it left waiting (a refund approved or confirmed later) runs. A customer who writes on a
# resolved ticket reopens it first.
AGENT_STAYS_OUT: frozenset[str] = frozenset({TicketStatus.WITH_HUMAN, TicketStatus.RESOLVED, TicketStatus.CLOSED})


# The largest number a bigint column (an id, a timeline seq) holds. A number a client sends past it
# is clamped (a seq) or no match (an id) before it reaches the database: psycopg cannot send it.
BIGINT_MAX = 2**63 - 1


class TicketPriority(models.TextChoices):
    LOW = "low", "Low"
    NORMAL = "normal", "Normal"
    HIGH = "high", "High"
    URGENT = "urgent", "Urgent"


class Ticket(models.Model):
    customer = models.ForeignKey(Customer, on_delete=models.PROTECT, related_name="tickets")
    subject = models.CharField(max_length=200)
    status = models.CharField(max_length=24, choices=TicketStatus.choices, default=TicketStatus.OPEN)
    priority = models.CharField(max_length=8, choices=TicketPriority.choices, default=TicketPriority.NORMAL)
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="assigned_tickets",
        limit_choices_to=can_work_tickets,
    )
    # A retried "open ticket" request carries the same reference and gets the same ticket.
    client_ref = models.CharField(max_length=100, null=True, blank=True)
    # The last sequence number handed to a TicketEvent; bumped under the row lock.
    last_event_seq = models.PositiveIntegerField(default=0)
    # The last event the customer has seen in their chat: replies after it are unread in My tickets.
    customer_seen_seq = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["status", "updated_at"])]
        permissions = [("handle_ticket", "Can work tickets in the staff inbox (reply, note, take over, hand back)")]
        constraints = [
            models.UniqueConstraint(
                fields=["customer", "client_ref"],
                condition=Q(client_ref__isnull=False),
                name="ticket_client_ref_unique_per_customer",
            )
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.subject}"


class AuthorKind(models.TextChoices):
    CUSTOMER = "customer", "Customer"
    AGENT = "agent", "Agent"
    STAFF = "staff", "Staff"
    SYSTEM = "system", "System"


class Message(models.Model):
    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="messages")
    author_kind = models.CharField(max_length=8, choices=AuthorKind.choices)
    author_user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    body = models.TextField()
    is_public = models.BooleanField(default=True, help_text="Visible to the customer; internal notes are not")
    # Supplied by the browser (or derived from a tool call's idempotency key) so
    # a retried send returns the original message instead of posting twice.
    client_msg_id = models.CharField(max_length=100, null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Set when the agent has taken a customer message into a turn.
    agent_handled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["ticket", "client_msg_id"],
                condition=Q(client_msg_id__isnull=False),
                name="message_client_id_unique_per_ticket",
            ),
            models.CheckConstraint(condition=~Q(body=""), name="message_body_not_empty"),
        ]
        indexes = [
            models.Index(
                fields=["ticket", "created_at"],
                condition=Q(author_kind="customer", agent_handled_at__isnull=True),
                name="message_unhandled_customer",
            )
        ]

    def __str__(self) -> str:
        return f"{self.author_kind} on #{self.ticket_id}: {self.body[:40]}"


class Attachment(models.Model):
    """A file a customer sent with a message: an image (re-encoded, metadata stripped) or a PDF.

    The bytes live in Django's storage (``storage_name``); this row says what they are. The type
    is the one sniffed from the content, never the one the name or the browser claimed.
    """

    # Served by attachment_position_unique_per_message (message, position).
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="attachments", db_index=False)
    # As the customer named it (cleaned of paths and control characters); shown, never trusted.
    original_name = models.CharField(max_length=200)
    content_type = models.CharField(max_length=64)
    size = models.PositiveIntegerField(help_text="Bytes stored (after an image is re-encoded)")
    sha256 = models.CharField(max_length=64, help_text="Of the bytes stored")
    storage_name = models.CharField(max_length=300, unique=True)
    # Where it sits among the message's files, as the customer picked them.
    position = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["message", "position"]
        constraints = [
            models.UniqueConstraint(fields=["message", "position"], name="attachment_position_unique_per_message"),
            models.CheckConstraint(condition=Q(size__gt=0), name="attachment_size_positive"),
            models.CheckConstraint(condition=~Q(original_name=""), name="attachment_name_not_empty"),
        ]

    def __str__(self) -> str:
        return f"{self.original_name} ({self.content_type}) on message {self.message_id}"


class ActorKind(models.TextChoices):
    CUSTOMER = "customer", "Customer"
    AGENT = "agent", "Agent run"
    STAFF = "staff", "Staff user"
    SYSTEM = "system", "System"


class TicketEvent(models.Model):
    """The append-only timeline. One row per change, numbered per ticket without gaps."""

    # Every index here is written by every event, the busiest insert there is: a ticket's events are
    # found by ticket_event_seq_unique (ticket, seq), and only events a person made are indexed by
    # that person (for deleting a user), not the agent's and the system's.
    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="events", db_index=False)
    seq = models.PositiveIntegerField()
    actor_kind = models.CharField(max_length=8, choices=ActorKind.choices)
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, db_index=False
    )
    # A free reference for non-user actors, e.g. "run:17".
    actor_ref = models.CharField(max_length=64, blank=True)
    kind = models.CharField(max_length=48)
    payload = models.JSONField(default=dict, blank=True)
    # Events the customer may see (public messages, friendly status changes).
    is_public = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["ticket", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["ticket", "seq"], name="ticket_event_seq_unique"),
            models.CheckConstraint(condition=Q(seq__gt=0), name="ticket_event_seq_positive"),
        ]
        indexes = [
            models.Index(fields=["actor_user"], condition=Q(actor_user__isnull=False), name="ticket_event_by_person")
        ]

    def __str__(self) -> str:
        return f"#{self.ticket_id}.{self.seq} {self.kind}"


RATING_SCORES = range(1, 6)
RATING_COMMENT_MAX_CHARS = 1000


def ticket_can_be_rated(ticket: Ticket) -> bool:
    """A resolved ticket, or one closed after it was resolved: the one rule for showing and taking a rating."""
    return ticket.status == TicketStatus.RESOLVED or (
        ticket.status == TicketStatus.CLOSED and ticket.resolved_at is not None
    )


class TicketRating(models.Model):
    """How the customer rated the help on a ticket: 1 to 5, with an optional comment. One per ticket;
    the customer may change it, and each change is on the timeline (``rated``)."""

    ticket = models.OneToOneField(Ticket, on_delete=models.CASCADE, related_name="rating")
    score = models.PositiveSmallIntegerField()
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(score__gte=1, score__lte=5), name="ticket_rating_score_1_5"),
        ]

    def __str__(self) -> str:
        return f"#{self.ticket_id} rated {self.score}/5"


# What PostgreSQL says when a text's search words (a tsvector) would pass its 1 MB: program_limit_exceeded.
_TOO_LONG_FOR_SEARCH_SQLSTATE = "54000"


class HelpArticle(models.Model):
    slug = models.SlugField(unique=True)
    title = models.CharField(max_length=200)
    body = models.TextField()
    search_vector = models.GeneratedField(
        expression=SearchVector("title", weight="A", config="english")
        + SearchVector("body", weight="B", config="english"),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["title"]
        indexes = [GinIndex(fields=["search_vector"], name="help_article_search")]

    def __str__(self) -> str:
        return self.title

    def clean(self) -> None:
        """An article the search cannot index is refused here, in words: stored, its search words are
        computed by PostgreSQL (``search_vector``), which refuses more than 1 MB of them, and the save
        was a database error (answered as "back in a moment", the text lost)."""
        super().clean()
        try:
            # The search words as search_vector computes them, in a savepoint: the refusal ends only it.
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    "SELECT setweight(to_tsvector('english'::regconfig, %s), 'A') "
                    "|| setweight(to_tsvector('english'::regconfig, %s), 'B')",
                    [self.title or "", self.body or ""],
                )
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != _TOO_LONG_FOR_SEARCH_SQLSTATE:
                raise
            raise ValidationError(
                {
                    "body": "This article is too long for the search the agent reads help with (PostgreSQL "
                    "keeps at most 1 MB of an article's words). Split it into several articles; nothing was saved."
                }
            ) from None
