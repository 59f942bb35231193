from __future__ import annotations

from django.contrib import admin

from tickets.models import Customer, HelpArticle, Message, Order, OrderLine, Ticket, TicketEvent


class ReadOnlyInline(admin.TabularInline):
    """The ledger is append-only from the admin's point of view."""

    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False


@admin.register(Customer)
class CustomerAdmin(admin.ModelAdmin):
    list_display = ["name", "email", "requires_refund_approval", "created_at"]
    list_filter = ["requires_refund_approval"]
    search_fields = ["name", "email"]
    list_editable = ["requires_refund_approval"]


class OrderLineInline(admin.TabularInline):
    model = OrderLine
    extra = 0


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ["number", "customer", "status", "total_cents", "currency", "payment_reference", "placed_at"]
    list_filter = ["status", "currency"]
    search_fields = ["number", "customer__email", "payment_reference"]
    inlines = [OrderLineInline]


class MessageInline(ReadOnlyInline):
    model = Message
    fields = ["created_at", "author_kind", "author_user", "is_public", "body", "client_msg_id"]
    readonly_fields = fields


class TicketEventInline(ReadOnlyInline):
    model = TicketEvent
    verbose_name = "timeline event"
    verbose_name_plural = "timeline"
    fields = ["seq", "created_at", "actor_kind", "actor_user", "actor_ref", "kind", "payload", "is_public"]
    readonly_fields = fields
    ordering = ["seq"]


@admin.register(Ticket)
class TicketAdmin(admin.ModelAdmin):
    list_display = ["id", "subject", "customer", "status", "priority", "assignee", "updated_at"]
    list_filter = ["status", "priority"]
    search_fields = ["subject", "customer__email", "customer__name"]
    readonly_fields = ["status", "last_event_seq", "created_at", "updated_at", "resolved_at", "client_ref"]
    raw_id_fields = ["customer", "assignee"]
    inlines = [MessageInline, TicketEventInline]


@admin.register(TicketEvent)
class TicketEventAdmin(admin.ModelAdmin):
    list_display = ["ticket", "seq", "kind", "actor_kind", "actor_ref", "created_at"]
    list_filter = ["kind", "actor_kind"]
    search_fields = ["ticket__id", "kind"]

    def has_change_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False


@admin.register(HelpArticle)
class HelpArticleAdmin(admin.ModelAdmin):
    list_display = ["title", "slug", "updated_at"]
    search_fields = ["title", "body"]
    prepopulated_fields = {"slug": ["title"]}
    exclude = ["search_vector"]
