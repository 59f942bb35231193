"""The admin for operations: the ledger is read here and changed only through ``tickets.services``."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from babel.numbers import list_currencies
from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import flatten_fieldsets, unquote
from django.contrib.admin.widgets import AutocompleteSelect
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.forms import UserChangeForm
from django.contrib.auth.models import AbstractBaseUser, Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import FieldDoesNotExist, PermissionDenied, ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.db.models import Exists, Max, Model, OuterRef, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from support.admin_site import is_value_of
from tickets import pages, services
from tickets.models import (
    HANDLE_PERMISSION,
    TICKET_TRANSITIONS,
    Customer,
    HelpArticle,
    Message,
    Order,
    OrderLine,
    Ticket,
    TicketEvent,
    TicketRating,
    TicketStatus,
)
from tickets.money import format_money
from tickets.selectors import assignable_staff, customers_of_person, customers_untied_by_email

# Ticket ids are bigints; a longer number is not an id (and would overflow the query).
_MAX_TICKET_ID = 2**63 - 1


class CheckedAutocompleteSelect(AutocompleteSelect):
    """An autocomplete that shows again only values that can be ids: the form says "Select a valid
    choice" for the others, and the page showing it again looked them up (ValueError, a 500)."""

    def optgroups(self, name: str, value: list[Any], attr: dict[str, Any] | None = None) -> list[Any]:
        to_field = self.field.remote_field.model._meta.get_field(self.field.remote_field.field_name)
        return super().optgroups(name, [v for v in value if is_value_of(to_field, v)], attr)


class IdsChecked(admin.ModelAdmin):
    """Ids a browser sends are checked before they reach a query (they were a 500): an autocomplete's
    value that is not an id is the form's own error. (A bulk action's selection is checked by the
    site, ``support.admin_site``, for every model.)"""

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if "widget" not in kwargs and db_field.name in self.get_autocomplete_fields(request):
            kwargs["widget"] = CheckedAutocompleteSelect(db_field, self.admin_site, using=kwargs.get("using"))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class ReadOnlyInline(admin.TabularInline):
    """The ledger is append-only from the admin's point of view. The rows each field names (a person,
    an order, a run) are read with the rows, not one query per row: a ticket many people worked on
    took a query per event, message, call and refund to open."""

    extra = 0
    can_delete = False
    show_change_link = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        named = [name for name in self.get_fields(request) if _names_a_row(self.model, name)]
        return super().get_queryset(request).select_related(*named)

    def has_add_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False


def _names_a_row(model: type[Model], name: str) -> bool:
    """Is ``name`` a field of ``model`` that holds another row (a foreign key, a one-to-one)?"""
    try:
        field = model._meta.get_field(name)
    except FieldDoesNotExist:
        return False  # a column of the admin's own (a method), not the model's
    return bool(field.concrete and (field.many_to_one or field.one_to_one))


def _plain(value: Any) -> Any:
    """A value as it travels in the page (JSON): compared the same way when it comes back."""
    return json.loads(json.dumps(value.pk if isinstance(value, Model) else value, cls=DjangoJSONEncoder))


class PageReadForm(forms.ModelForm):
    """A change page that carries its ``editable`` values as it showed them: a save writes only what
    the person changed on the page, and refuses a change to a value someone else changed since the
    page was read. (Django compares what is posted with the row as it is when it saves, so a page
    read before a colleague's change would write its old value back over it, silently.)"""

    page_read = forms.CharField(widget=forms.HiddenInput, required=False)
    editable: tuple[str, ...] = ()
    many: tuple[str, ...] = ()  # many-to-many fields among them (``PageReadManyForm``)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["page_read"].initial = json.dumps(self.values_of(self.instance))

    @classmethod
    def values_of(cls, obj: Model) -> dict[str, Any]:
        return {name: _plain(getattr(obj, obj._meta.get_field(name).attname)) for name in cls.editable}

    def page_values(self) -> dict[str, Any] | None:
        try:
            read = json.loads(self.cleaned_data.get("page_read") or "null")
        except ValueError:
            return None
        return read if isinstance(read, dict) and set(read) == set(self.editable) else None

    def changed_on_the_page(self) -> list[str]:
        """The editable fields the person changed on the page (what was posted against what it showed)."""
        read = self.page_values()
        if read is None:
            return [name for name in self.changed_data if name in self.editable]
        posted = {name: self.posted(name) for name in self.editable if name in self.cleaned_data}
        return [name for name, value in posted.items() if value != read[name]]

    def posted(self, name: str) -> Any:
        """A value as posted, as ``values_of`` reads it from the row."""
        return _plain(self.cleaned_data[name])

    def already_as_asked(self, now: dict[str, Any] | None = None) -> bool:
        """Does the row (``now``: its ``values_of``, else read) already read all that the page changed,
        and did it change something? Then it is the same page sent again, its change already saved."""
        changed = self.changed_on_the_page()
        if not self.instance.pk or not changed or any(name not in self.cleaned_data for name in changed):
            return False
        if now is None:
            now = self.values_of(type(self.instance)._default_manager.get(pk=self.instance.pk))
        return all(now[name] == self.posted(name) for name in changed)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        read = self.page_values()
        if read is None or not self.instance.pk:
            return cleaned
        rows = type(self.instance)._default_manager
        if connection.in_atomic_block:
            # The admin saves in the transaction this runs in: the row is held from this comparison
            # to the save, so a change committed in between (a take-over in the inbox) is seen here,
            # not written over by the save.
            rows = rows.select_for_update()
        now = self.values_of(rows.get(pk=self.instance.pk))
        changed = self.changed_on_the_page()
        if self.already_as_asked(now):
            # The row already reads all that the page asks (the same page sent twice, a double click on
            # Save): nothing would be written over anyone, so it is no conflict.
            return cleaned
        for name in changed:
            if now[name] != read[name]:
                label = self.fields[name].label if name in self.fields else name
                self.add_error(
                    None,
                    f"{str(label).capitalize()} was changed by someone else since this page was opened; nothing "
                    "was saved. Reload the page and make your change again.",
                )
        return cleaned


class OrderLineForm(PageReadForm):
    """A line of an order's page: carries what it showed, writes only what the person changed on it,
    and refuses a change to a value someone changed since (a line a colleague corrected after the page
    was read looked "changed" to Django, and got the page's old quantity and price back)."""

    editable = ("sku", "description", "quantity", "unit_price_cents")

    def clean_quantity(self) -> int | None:
        quantity = self.cleaned_data.get("quantity")
        if quantity is not None and quantity < 1:
            raise forms.ValidationError("A line's quantity must be at least 1.")
        return quantity

    class Meta:
        model = OrderLine
        fields = ("sku", "description", "quantity", "unit_price_cents")

    def save(self, commit: bool = True) -> OrderLine:
        if not self.instance.pk or self.page_values() is None:
            return super().save(commit)
        changed = self.changed_on_the_page()
        if commit and changed:
            self.instance.save(update_fields=changed)
        return self.instance


class OrderLineInline(admin.TabularInline):
    model = OrderLine
    form = OrderLineForm
    extra = 0
    # page_read: what each line showed, sent back with the page (a hidden field).
    fields = ["sku", "description", "quantity", "unit_price_cents", "unit_price", "page_read"]
    readonly_fields = ["unit_price"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[OrderLine]:
        # Each line's price names the order's currency: read with the lines, not once per line.
        return super().get_queryset(request).select_related("order")

    @admin.display(description="unit price")
    def unit_price(self, line: OrderLine) -> str:
        if line.pk is None:
            return ""
        return format_money(line.unit_price_cents, line.order.currency)


class OrderAdminForm(PageReadForm):
    """An order's page: a status a refund set meanwhile (refunded) is never put back by a page read before,
    and the total is never set below what was refunded on the order."""

    # What was (or may have been) refunded on an order, in cents: the app that moves money says (agents/admin.py).
    refunded_on: list[Callable[[Order], int]] = []

    def clean_currency(self) -> str:
        """A currency as people write it ("USD"), kept as the ledger does ("usd"); one nobody pays in is
        refused here, in words, not by the database's rule (or, for three letters, not at all: the
        provider then refused every refund of the order)."""
        code = str(self.cleaned_data.get("currency") or "").strip()
        if not (code.isascii() and code.isalpha() and len(code) == 3 and code.upper() in list_currencies()):
            raise forms.ValidationError(
                f"{code!r} is not a currency: write its three-letter code, such as usd, eur or jpy."
            )
        return code.lower()

    def clean_total_cents(self) -> int | None:
        total = self.cleaned_data.get("total_cents")
        if total is not None and total <= 0:
            raise forms.ValidationError(
                "An order's total must be more than zero, in the currency's smallest unit (cents)."
            )
        return total

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        total = cleaned.get("total_cents")
        if self.instance.pk and total is not None and "total_cents" in self.changed_data:
            refunded = max((refunded_on(self.instance) for refunded_on in self.refunded_on), default=0)
            if total < refunded:
                self.add_error(
                    "total_cents",
                    f"{format_money(refunded, self.instance.currency)} was refunded on this order (paid, pending or "
                    "uncertain): its total cannot be less. Nothing was saved.",
                )
        return cleaned

    editable = (
        "number", "customer", "status", "currency", "total_cents", "payment_reference", "placed_at", "shipped_at",
        "delivered_at",
    )  # fmt: skip

    class Meta:
        model = Order
        fields = (
            "number", "customer", "status", "currency", "total_cents", "payment_reference", "placed_at", "shipped_at",
            "delivered_at",
        )  # fmt: skip


class WritesWhatThePageChanged(admin.ModelAdmin):
    """A change page (its form a ``PageReadForm``) that writes only what was changed on it."""

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None or "page_read" in flatten_fieldsets(fieldsets):
            return fieldsets
        return [*fieldsets, (None, {"fields": ["page_read"]})]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not change:
            super().save_model(request, obj, form, change)
            return
        changed = [name for name in form.changed_on_the_page() if name not in form.many]
        if changed:
            obj.save(update_fields=changed)
        obj.refresh_from_db()

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        if change:
            changed = form.changed_on_the_page()
            for name in form.many:
                if name not in changed:
                    form.cleaned_data.pop(name, None)  # as it is now, not as the page read it
        super().save_related(request, form, formsets, change)


@admin.register(Order)
class OrderAdmin(WritesWhatThePageChanged, IdsChecked):
    form = OrderAdminForm
    list_display = ["number", "customer", "status", "total_amount", "payment_reference", "placed_at"]
    list_filter = ["status", "currency"]
    list_select_related = ["customer"]
    search_fields = ["number", "customer__email", "payment_reference"]
    autocomplete_fields = ["customer"]
    # page_read: what the page showed, sent back with it (a hidden field): without it among the page's
    # fields no browser sent it, and a page read before a refund put the old status back.
    fields = [
        "number", "customer", "status", "currency", "total_cents", "total_amount", "payment_reference",
        "placed_at", "shipped_at", "delivered_at", "page_read",
    ]  # fmt: skip
    readonly_fields = ["total_amount"]
    inlines = [OrderLineInline]
    # What a refund on the order was (or may be) paid against: the provider is asked about it under
    # these (the reconciler, a retry under the same key), so they stay as they were once one exists.
    PAID_AGAINST = ["number", "customer", "currency", "payment_reference"]
    # Whether money was, or may be, asked for on an order: the app that moves it says (agents/admin.py).
    money_asked_on: list[Callable[[Order], bool]] = []

    def get_readonly_fields(self, request: HttpRequest, obj: Order | None = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and any(asked(obj) for asked in self.money_asked_on):
            fields += self.PAID_AGAINST
        return fields

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple[Any, Any, set[str], Any]:
        """An order money was asked for on is kept (its page and the list's "Delete selected"): the
        tickets' tool calls and approval requests name it by its number, with no key that protects it
        until a refund row exists."""
        to_delete, model_count, perms_needed, protected = super().get_deleted_objects(objs, request)
        if any(asked(order) for order in objs for asked in self.money_asked_on):
            # Django refuses the deletion (403 when posted) and lists this as what may not be deleted.
            perms_needed.add("an order a refund was asked for on (a ticket's tool calls and approvals name it)")
        return to_delete, model_count, perms_needed, protected

    @admin.display(description="total", ordering="total_cents")
    def total_amount(self, order: Order) -> str:
        if order.pk is None:
            return ""
        return format_money(order.total_cents, order.currency)


class MessageInline(ReadOnlyInline):
    model = Message
    fields = ["created_at", "author_kind", "author_user", "is_public", "body", "client_msg_id"]
    readonly_fields = fields


class TicketRatingInline(ReadOnlyInline):
    model = TicketRating
    verbose_name = "customer rating"
    fields = ["score", "comment", "created_at", "updated_at"]
    readonly_fields = fields


class TicketEventInline(ReadOnlyInline):
    model = TicketEvent
    verbose_name = "timeline event"
    verbose_name_plural = "timeline"
    fields = ["seq", "created_at", "actor_kind", "actor_user", "actor_ref", "kind", "payload", "is_public"]
    readonly_fields = fields
    ordering = ["seq"]


@dataclass(frozen=True)
class TicketButton:
    """A button on the ticket page that calls one service for the signed-in person."""

    slug: str
    label: str
    service: Callable[..., Ticket]
    shown: Callable[[Ticket, AbstractBaseUser], bool]
    # What the page showed, sent back with the click (``tickets.pages``): a page that is no longer
    # true (a colleague took the ticket, the customer wrote) is refused, as in the inbox.
    reads: tuple[str, ...] = ()
    # The button makes the person who presses it the ticket's holder: only someone who may work
    # tickets (held by anyone else it would sit "with a person" nobody can answer as).
    holds: bool = False

    @property
    def url_name(self) -> str:
        return f"tickets_ticket_{self.slug.replace('-', '_')}"


# The buttons a ticket's status allows, as the services read TICKET_TRANSITIONS: taking over also
# reopens a resolved ticket; handing back is only for a ticket a person has.
TICKET_BUTTONS: tuple[TicketButton, ...] = (
    TicketButton(
        "take-over",
        "Take over",
        # The page names who has the ticket: taking it from the colleague it names is what was asked.
        services.ticket_take_over,
        lambda ticket, user: (
            ticket.status != TicketStatus.CLOSED
            and not (ticket.status == TicketStatus.WITH_HUMAN and ticket.assignee_id == user.pk)
        ),
        reads=("holder", "seen"),
        holds=True,
    ),
    TicketButton(
        "hand-back",
        "Hand back to the agent",
        services.ticket_hand_back,
        lambda ticket, user: ticket.status == TicketStatus.WITH_HUMAN,
        reads=("holder", "seen"),
    ),
    TicketButton(
        "resolve",
        "Resolve",
        services.ticket_resolve,
        lambda ticket, user: TicketStatus.RESOLVED in TICKET_TRANSITIONS[ticket.status],
        reads=("holder", "seen"),
    ),
    TicketButton(
        "close",
        "Close",
        services.ticket_close,
        lambda ticket, user: TicketStatus.CLOSED in TICKET_TRANSITIONS[ticket.status],
        reads=("holder", "seen"),
    ),
)


def ticket_id_in(search_term: str) -> int | None:
    """The ticket id a search asks for ("123" or "#123"), or None when it is not a number."""
    term = search_term.strip().removeprefix("#")
    if not term.isascii() or not term.isdigit() or int(term) > _MAX_TICKET_ID:
        return None
    return int(term)


class OfATicket(admin.ModelAdmin):
    """A list of rows that each belong to a ticket (its timeline, runs, calls, refunds...): a ticket's
    number in the search ("12", "#12") lists that ticket's rows only, as the ticket list finds that
    ticket only. Searched as text, "1" listed the rows of tickets 1, 10, 11... and of customers whose
    email has a 1 in it, and a bulk action on what the search showed acted on other tickets' rows."""

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        ticket_id = ticket_id_in(search_term)
        if ticket_id is None:
            return super().get_search_results(request, queryset, search_term)
        return queryset.filter(ticket_id=ticket_id), False


class TicketAdminForm(PageReadForm):
    """The ticket's page in the admin: a take-over meanwhile is never undone by a stale page."""

    editable = tuple(services.TICKET_EDITABLE_FIELDS)

    class Meta:
        model = Ticket
        fields = ("subject", "priority", "assignee")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "assignee" in self.fields:
            self.fields["assignee"].queryset = assignable_staff()

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        # The row as it is now (held since ``PageReadForm.clean`` when the admin saves in a transaction):
        # a ticket closed since the page was read is final (``services.ticket_edit``): given to nobody,
        # its subject and priority as they were.
        changed = self.changed_on_the_page() if self.instance.pk else []
        if changed:
            status = Ticket.objects.filter(pk=self.instance.pk).values_list("status", flat=True).first()
            if status == TicketStatus.CLOSED:
                self.add_error(
                    None,
                    f"Ticket #{self.instance.pk} is closed; nothing more can happen on it, so its subject, "
                    "priority and assignee are not changed. Nothing was saved.",
                )
        return cleaned


class CustomerAdminForm(PageReadForm):
    """A customer's page: a colleague's "every refund reviewed" is never undone by a page read before it.
    On one's own customer profile (``customers_of_person``), the review is not taken away, nor the login
    and email address that tie the profile to its person: a colleague does that."""

    editable = ("user", "name", "email", "requires_refund_approval")
    person: AbstractBaseUser | None = None  # who saves the page (set per request: ``CustomerAdmin.get_form``)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        person = self.person
        if person is None or not self.instance.pk:
            return cleaned
        changed = self.changed_on_the_page()
        loosened = "requires_refund_approval" in changed and not cleaned.get("requires_refund_approval")
        untied = [name for name in ("user", "email") if name in changed]
        if (loosened or untied) and customers_of_person(user=person).filter(pk=self.instance.pk).exists():
            self.add_error(
                None,
                "This is your own customer profile: the review of your refunds, and the login and email address "
                "that tie the profile to you, are a colleague's to change. Nothing was saved.",
            )
        return cleaned

    class Meta:
        model = Customer
        fields = ("user", "name", "email", "requires_refund_approval")


@admin.register(Customer)
class CustomerAdmin(WritesWhatThePageChanged, IdsChecked):
    form = CustomerAdminForm
    list_display = ["name", "email", "requires_refund_approval", "created_at"]
    list_filter = ["requires_refund_approval"]
    search_fields = ["name", "email"]
    readonly_fields = ["created_at"]
    # The login is found by typing: a drop-down of every login there is (every customer's, every
    # colleague's) made each customer's page grow with all of them.
    autocomplete_fields = ["user"]
    # The flag is set on the selected customers by an action, never by saving a whole list: a list
    # read before a colleague flagged someone would write its old value back.
    actions = ["review_every_refund", "stop_reviewing_every_refund"]

    def get_form(self, request: HttpRequest, obj: Customer | None = None, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, **kwargs)
        return type(form.__name__, (form,), {"person": request.user})

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # Read before the rows: the list never claims to have shown a change logged after them.
        listed = LogEntry.objects.aggregate(last=Max("pk"))["last"] or 0
        return super().changelist_view(request, {"listed_change": listed, **(extra_context or {})})

    def _flag(self, request: HttpRequest, queryset: QuerySet[Customer], flagged: bool) -> None:
        with transaction.atomic():
            chosen = Customer.objects.select_for_update().filter(pk__in=queryset.values("pk"))
            changing = list(chosen.exclude(requires_refund_approval=flagged).order_by("pk"))
            # The list acted on is the list as it is now ("Select all" is the filter, read again): a customer
            # someone changed since the list was read (a colleague flagged them) is not what the person chose.
            # Only a loosening is held back: reviewing every refund is never unsafe to do as asked.
            listed = pages.page_read(request, "listed")
            changed_since = set()
            if listed is not None and not flagged:
                changed_since = set(
                    LogEntry.objects.filter(
                        pk__gt=listed,
                        content_type=ContentType.objects.get_for_model(Customer),
                        object_id__in=[str(c.pk) for c in changing],
                    ).values_list("object_id", flat=True)
                )
            left = [c for c in changing if str(c.pk) in changed_since]
            changing = [c for c in changing if str(c.pk) not in changed_since]
            # The review of one's own refunds is a colleague's to take away (``CustomerAdminForm``).
            own = set()
            if not flagged:
                own = set(customers_of_person(user=request.user).values_list("pk", flat=True))
            kept_own = [c for c in changing if c.pk in own]
            changing = [c for c in changing if c.pk not in own]
            Customer.objects.filter(pk__in=[c.pk for c in changing]).update(requires_refund_approval=flagged)
            for customer in changing:
                self.log_change(request, customer, [{"changed": {"fields": ["requires_refund_approval"]}}])
        words = "Every refund reviewed" if flagged else "Refunds follow the usual rules"
        self.message_user(request, f"{words}: {len(changing)} customer(s) changed.", messages.SUCCESS)
        if kept_own:
            names = ", ".join(f"{c.name} <{c.email}>" for c in kept_own)
            self.message_user(
                request,
                f"Left reviewed: {names}, your own customer profile. A colleague stops the review of your refunds.",
                messages.WARNING,
            )
        if left:
            names = ", ".join(f"{c.name} <{c.email}>" for c in left)
            self.message_user(
                request,
                f"Left as they are, changed by someone since this list was read: {names}. Read the list again.",
                messages.WARNING,
            )

    @admin.action(description="Review every refund of the selected customers", permissions=["change"])
    def review_every_refund(self, request: HttpRequest, queryset: QuerySet[Customer]) -> None:
        self._flag(request, queryset, True)

    @admin.action(description="Stop reviewing every refund of the selected customers", permissions=["change"])
    def stop_reviewing_every_refund(self, request: HttpRequest, queryset: QuerySet[Customer]) -> None:
        self._flag(request, queryset, False)


@admin.register(Ticket)
class TicketAdmin(IdsChecked):
    form = TicketAdminForm
    list_display = ["id", "subject", "customer", "status_as_listed", "priority", "assignee", "updated_at"]
    list_filter = ["status", "priority"]
    list_select_related = ["customer", "assignee"]
    search_fields = ["subject", "customer__email", "customer__name", "customer__orders__number"]
    search_help_text = "A ticket number, an order number, the customer's email or name, or words of the subject."
    readonly_fields = [
        "customer", "status", "last_event_seq", "customer_seen_seq", "created_at", "updated_at", "resolved_at",
        "client_ref",
    ]  # fmt: skip
    autocomplete_fields = ["assignee"]
    inlines = [TicketRatingInline, MessageInline, TicketEventInline]

    def get_readonly_fields(self, request: HttpRequest, obj: Ticket | None = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        # A closed ticket is final (``services.ticket_edit``): its page offers nothing to edit. A page read
        # before it was closed sent its fields: the form takes them, and refuses a change (``clean``),
        # rather than drop it without a word.
        if obj is not None and obj.status == TicketStatus.CLOSED:
            sent_by_the_page = request.POST if request.method == "POST" else {}
            fields += [name for name in TicketAdminForm.editable if name not in sent_by_the_page]
        return fields

    @admin.display(description="status", ordering="status")
    def status_as_listed(self, ticket: Ticket) -> str:
        """The status, and (hidden, sent back with a bulk action) the last timeline event the row
        showed: a bulk Resolve or Close leaves a ticket the customer wrote on since (``tickets.pages``)."""
        return format_html(
            '{}<input type="hidden" name="seen-{}" value="{}">',
            ticket.get_status_display(),
            ticket.pk,
            ticket.last_event_seq,
        )

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # Read before the rows: the mark never claims more than the list showed.
        listed = pages.list_read_at()
        return super().changelist_view(request, {"listed_event": listed, **(extra_context or {})})

    def has_handle_permission(self, request: HttpRequest) -> bool:
        """May work tickets (answer customers as a ticket's holder), as the staff inbox requires."""
        return bool(request.user.is_active and request.user.has_perm(HANDLE_PERMISSION))

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Tickets are opened by customers (tickets.services.ticket_open), never typed in here.
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Ticket | None = None) -> bool:
        # The ledger: a ticket is resolved or closed, never deleted (with it would go the customer's
        # messages, the timeline, the runs and the approvals), by anyone, a superuser too. Without
        # this the page offered Delete and the list "Delete selected", held back only because each
        # related ledger admin happens to refuse deletion.
        return False

    def save_model(self, request: HttpRequest, obj: Ticket, form: Any, change: bool) -> None:
        """Through the service: only what the form changed is written, on the row as it is now, with
        the events that say who changed what."""
        if not change:
            super().save_model(request, obj, form, change)
            return
        changes = {name: getattr(obj, name) for name in form.changed_on_the_page()}
        current = services.ticket_edit(ticket=obj.pk, user=request.user, changes=changes)
        for field in Ticket._meta.concrete_fields:
            setattr(obj, field.attname, getattr(current, field.attname))

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Ticket], search_term: str
    ) -> tuple[QuerySet[Ticket], bool]:
        ticket_id = ticket_id_in(search_term)
        if ticket_id is None:
            return super().get_search_results(request, queryset, search_term)
        # A number is a ticket id, or a shop's all-digit order number; never a piece of an
        # email address or an order number (searching "12" must not list every customer12).
        digits = search_term.strip().removeprefix("#")
        numbered_order = Order.objects.filter(customer=OuterRef("customer"), number=digits)
        return queryset.filter(pk=ticket_id) | queryset.filter(Exists(numbered_order)), False

    # --- The buttons on the ticket page -------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        buttons = [
            path(
                f"<path:object_id>/{button.slug}/",
                self.admin_site.admin_view(require_POST(self._button_view(button))),
                name=button.url_name,
            )
            for button in TICKET_BUTTONS
        ]
        # Before the default patterns: their "<path:object_id>/" would take these URLs.
        return [*buttons, *super().get_urls()]

    def _button_view(self, button: TicketButton) -> Callable[..., HttpResponse]:
        def view(request: HttpRequest, object_id: str) -> HttpResponse:
            ticket = self.get_object(request, unquote(object_id))
            if ticket is None:
                return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
            if not self.has_change_permission(request, ticket) or (
                button.holds and not self.has_handle_permission(request)
            ):
                raise PermissionDenied
            try:
                ticket = button.service(ticket=ticket, user=request.user, **pages.as_read(request, button.reads))
            except ValidationError as exc:
                self.message_user(request, " ".join(exc.messages), messages.ERROR)
            else:
                if services.nothing_changed(ticket):
                    self.message_user(request, services.nothing_changed(ticket), messages.INFO)
                else:
                    self.message_user(
                        request, f"{button.label}: ticket #{ticket.pk} is now {ticket.get_status_display().lower()}."
                    )
            return HttpResponseRedirect(
                reverse(
                    f"admin:{self.opts.app_label}_{self.opts.model_name}_change",
                    args=[ticket.pk],
                    current_app=self.admin_site.name,
                )
            )

        view.__name__ = f"ticket_{button.slug.replace('-', '_')}"
        return view

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Ticket | None = None,
    ) -> TemplateResponse:
        context["ticket_buttons"] = []
        if obj is not None and self.has_change_permission(request, obj):
            shown = {"holder": pages.holder_shown(obj), "seen": obj.last_event_seq}
            context["ticket_buttons"] = [
                {
                    "label": button.label,
                    "url": reverse(f"admin:{button.url_name}", args=[obj.pk], current_app=self.admin_site.name),
                    "page": [(field, shown[field]) for field in button.reads],
                }
                for button in TICKET_BUTTONS
                if button.shown(obj, request.user) and (not button.holds or self.has_handle_permission(request))
            ]
        return super().render_change_form(request, context, add, change, form_url, obj)


@admin.register(TicketEvent)
class TicketEventAdmin(OfATicket, IdsChecked):
    """The timeline is written by the services only; here it is read."""

    list_display = ["ticket", "seq", "kind", "actor_kind", "actor_user", "actor_ref", "created_at"]
    list_filter = ["kind", "actor_kind"]
    list_select_related = ["ticket", "actor_user"]
    search_fields = ["kind"]  # and a ticket's number (OfATicket)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: TicketEvent | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: TicketEvent | None = None) -> bool:
        return False


class HelpArticleForm(PageReadForm):
    """A help article's page (what the agent answers from): a colleague's correction saved since the
    page was read is never written back over by it; text changed on both is refused, shown again."""

    editable = ("title", "slug", "body")

    class Meta:
        model = HelpArticle
        fields = ("title", "slug", "body")


@admin.register(HelpArticle)
class HelpArticleAdmin(WritesWhatThePageChanged, IdsChecked):
    form = HelpArticleForm
    list_display = ["title", "slug", "updated_at"]
    search_fields = ["title", "body"]
    prepopulated_fields = {"slug": ["title"]}
    # Dated by each save: a field of the form, it kept the first writing's time unless retyped.
    # page_read: what the page showed, sent back with it (a hidden field).
    fields = ["title", "slug", "body", "updated_at"]
    readonly_fields = ["updated_at"]

    def save_model(self, request: HttpRequest, obj: HelpArticle, form: Any, change: bool) -> None:
        obj.updated_at = timezone.now()
        if not change:
            super().save_model(request, obj, form, change)
            return
        changed = form.changed_on_the_page()
        if changed:  # only what the page changed, dated
            obj.save(update_fields=[*changed, "updated_at"])
        obj.refresh_from_db()


class PageReadManyForm(PageReadForm):
    """``PageReadForm`` with many-to-many fields (``many``) among the ``editable``: read as their ids."""

    @classmethod
    def values_of(cls, obj: Model) -> dict[str, Any]:
        plain = {name: _plain(getattr(obj, name)) for name in cls.editable if name not in cls.many}
        return {**plain, **{name: sorted(getattr(obj, name).values_list("pk", flat=True)) for name in cls.many}}

    def posted(self, name: str) -> Any:
        if name in self.many:
            return sorted(item.pk for item in self.cleaned_data[name])
        return super().posted(name)


def _not_held(giver: AbstractBaseUser, permissions: Any) -> list[str]:
    """The permissions among ``permissions`` that ``giver`` does not have, as "app.codename"."""
    labels = {f"{p.content_type.app_label}.{p.codename}" for p in permissions}
    return sorted(label for label in labels if not giver.has_perm(label))


class GivesWhatTheGiverHas(forms.ModelForm):
    """A form that gives permissions (directly, or through groups): a giver who is no superuser gives only
    permissions they have themselves. Anyone allowed to change accounts or groups could otherwise give
    themselves (or a friend) anything: deciding refund approvals, reconciling refunds with the provider.
    Only what the form adds is checked; what the person or group already had stays. ``giver``: set
    per request by the admin (``GiverOnTheForm``); None gives nothing more than the form's own checks."""

    giver: AbstractBaseUser | None = None
    # The form's permission fields, and the groups field (whose groups' permissions are given).
    permission_fields: tuple[str, ...] = ()
    group_fields: tuple[str, ...] = ()

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        giver = self.giver
        if giver is None or (giver.is_active and giver.is_superuser):
            return cleaned
        for name in (*self.permission_fields, *self.group_fields):
            if name not in self.fields or name not in cleaned:
                continue
            had = set(getattr(self.instance, name).all()) if self.instance.pk else set()
            added = [item for item in cleaned[name] if item not in had]
            given = (
                Permission.objects.filter(group__in=added)
                if name in self.group_fields
                else Permission.objects.filter(pk__in=[p.pk for p in added])
            )
            missing = _not_held(giver, given.select_related("content_type"))
            if missing:
                self.add_error(
                    name,
                    "You can give only permissions you have yourself; nothing was saved. You do not have: "
                    + ", ".join(missing)
                    + ".",
                )
        return cleaned


class GiverOnTheForm(admin.ModelAdmin):
    """Gives the page's form (a ``GivesWhatTheGiverHas``) the person saving it."""

    def get_form(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, **kwargs)
        return type(form.__name__, (form,), {"giver": request.user})


class StaffUserChangeForm(GivesWhatTheGiverHas, PageReadManyForm, UserChangeForm):
    """A person's page: access a colleague took away (deactivated, out of the "Support staff" group)
    is never given back by a page read before it; a giver who is no superuser gives no permission they
    do not have."""

    permission_fields = ("user_permissions",)
    group_fields = ("groups",)

    editable = (
        "username", "first_name", "last_name", "email", "is_active", "is_staff", "is_superuser", "groups",
        "user_permissions",
    )  # fmt: skip
    many = ("groups", "user_permissions")

    class Meta(UserChangeForm.Meta):
        pass

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        giver = self.giver
        if giver is None or giver.pk != self.instance.pk or "email" not in self.changed_on_the_page():
            return cleaned
        # Their own address ties their second customer profile to them (``customers_of_person``): changed
        # by themselves, that profile's refunds would be theirs to approve. A colleague changes it.
        person = get_user_model()._default_manager.get(pk=self.instance.pk)
        untied = customers_untied_by_email(user=person, email=str(cleaned.get("email") or ""))
        if untied.exists():
            names = ", ".join(str(customer) for customer in untied.order_by("pk"))
            self.add_error(
                "email",
                f"Your email address ties the customer profile {names} to you, so that a colleague reviews its "
                "refunds: a colleague changes it. Nothing was saved.",
            )
        return cleaned


class StaffUserAdmin(GiverOnTheForm, WritesWhatThePageChanged, UserAdmin):
    """Django's user admin, writing only what was changed on the page, and deleting no one the ledger
    names (deleted, they would leave the timeline's events and messages saying nobody did them).

    Staff who may change accounts but are no superusers: a superuser's account (its page, its
    password) is not theirs to change, "Superuser status" is not theirs to give, and they give no
    permission they do not have (``GivesWhatTheGiverHas``). Otherwise changing accounts was all it
    took to become a superuser, or to sign in as one after setting their password."""

    form = StaffUserChangeForm

    @staticmethod
    def _above(request: HttpRequest, obj: Any) -> bool:
        """Is ``obj`` a superuser's account, and the person asking not a superuser?"""
        return obj is not None and obj.is_superuser and not request.user.is_superuser

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not self._above(request, obj) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not self._above(request, obj) and super().has_delete_permission(request, obj)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        readonly = list(super().get_readonly_fields(request, obj))
        return readonly if request.user.is_superuser else [*readonly, "is_superuser"]

    # Where the ledger names a person (model, field): their foreign keys are SET_NULL, so deleting the
    # person empties them rather than being refused. Other apps add theirs (agents/admin.py).
    named_on_the_ledger: list[tuple[type[Model], str]] = [
        (TicketEvent, "actor_user"), (Message, "author_user"), (Ticket, "assignee"),
    ]  # fmt: skip

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple[Any, Any, set[str], Any]:
        to_delete, model_count, perms_needed, protected = super().get_deleted_objects(objs, request)
        pks = [user.pk for user in objs]
        if not request.user.is_superuser and any(user.is_superuser for user in objs):
            perms_needed.add("the accounts of superusers (only a superuser deletes them)")
        named = (model._default_manager.filter(**{f"{field}__in": pks}) for model, field in self.named_on_the_ledger)
        if any(rows.exists() for rows in named):
            # Django refuses the deletion (403 when posted) and lists this as what may not be deleted.
            perms_needed.add(
                "the ticket timeline, messages or assignments that name them (deactivate the person "
                "instead: untick Active on their page)"
            )
        return to_delete, model_count, perms_needed, protected


class GroupPageForm(GivesWhatTheGiverHas, PageReadManyForm):
    """A group's page: a permission a colleague took from the group is never given back by a page read
    before; a giver who is no superuser adds no permission they do not have."""

    editable = ("name", "permissions")
    many = ("permissions",)
    permission_fields = ("permissions",)

    class Meta:
        model = Group
        fields = ("name", "permissions")


class GroupPageAdmin(GiverOnTheForm, WritesWhatThePageChanged, GroupAdmin):
    """Django's group admin, writing only what was changed on the page."""

    form = GroupPageForm


admin.site.unregister(get_user_model())
admin.site.register(get_user_model(), StaffUserAdmin)
admin.site.unregister(Group)
admin.site.register(Group, GroupPageAdmin)
