"""Demo data: customers with orders, a staff user, help articles. Used by ``seed_demo``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import transaction
from django.utils import timezone

from tickets.models import Customer, HelpArticle, Order, OrderLine, OrderStatus

DEMO_PASSWORD = "support-demo"
STAFF_USERNAME = "staff"


@dataclass(frozen=True)
class DemoOrder:
    number: str
    status: str
    lines: tuple[tuple[str, str, int, int], ...]  # sku, description, quantity, unit price in cents
    days_ago: int


DEMO_CUSTOMERS: dict[str, dict] = {
    "alice": {
        "name": "Alice Martin",
        "email": "alice@example.com",
        "flagged": False,
        "orders": [
            DemoOrder("A-1001", OrderStatus.DELIVERED, (("MUG-01", "Ceramic mug", 2, 1450),), 12),
            DemoOrder("A-1002", OrderStatus.SHIPPED, (("KTL-02", "Electric kettle", 1, 4999),), 3),
            DemoOrder("A-1003", OrderStatus.PENDING, (("TEA-10", "Green tea, 500 g", 1, 1899),), 0),
        ],
    },
    "bob": {
        "name": "Bob Okafor",
        "email": "bob@example.com",
        "flagged": False,
        "orders": [
            DemoOrder("B-2001", OrderStatus.DELIVERED, (("ESP-01", "Espresso machine", 1, 64900),), 20),
            DemoOrder("B-2002", OrderStatus.CANCELLED, (("GRN-03", "Burr grinder", 1, 8900),), 40),
        ],
    },
    "carol": {
        "name": "Carol Nguyen",
        "email": "carol@example.com",
        "flagged": True,
        "orders": [
            DemoOrder("C-3001", OrderStatus.DELIVERED, (("PAN-05", "Cast-iron pan", 1, 3900),), 8),
        ],
    },
}

HELP_ARTICLES = [
    (
        "refund-policy",
        "Refund policy",
        "You can ask for a refund on a paid, shipped or delivered order within 30 days of delivery. "
        "Refunds go back to the original payment method and usually arrive in 5 to 10 business days. "
        "Partial refunds are possible for damaged items. Refunds above $200 are reviewed by a member "
        "of our team before they are issued. Cancelled orders are never charged.",
    ),
    (
        "shipping",
        "Shipping times and tracking",
        "Orders ship within 2 business days. Standard shipping takes 3 to 5 business days; express "
        "takes 1 to 2. You receive a tracking link by email when your order ships. Delivery delays "
        "caused by the carrier can be tracked on the carrier's site.",
    ),
    (
        "returns",
        "Returning an item",
        "To return an item, keep it in its original packaging and contact us within 30 days of "
        "delivery. We send a prepaid return label. Once the item arrives at our warehouse we issue "
        "the refund for the returned items.",
    ),
    (
        "damaged-items",
        "Damaged or broken items",
        "If an item arrived damaged or broken, tell us which order and item, ideally with a photo. "
        "We refund the damaged item or send a replacement, whichever you prefer; no return needed.",
    ),
]


@transaction.atomic
def seed_demo() -> dict[str, int]:
    """Create the demo data if missing. Idempotent: a second run changes nothing."""
    user_model = get_user_model()
    created = {"customers": 0, "orders": 0, "articles": 0, "staff": 0}
    now = timezone.now()

    staff, made = user_model.objects.get_or_create(
        username=STAFF_USERNAME,
        defaults={"email": "staff@example.com", "is_staff": True, "is_superuser": True, "first_name": "Sam"},
    )
    if made:
        staff.set_password(DEMO_PASSWORD)
        staff.save(update_fields=["password"])
        created["staff"] += 1
    decide = Permission.objects.filter(codename="decide_approval").first()
    if decide is not None:
        staff.user_permissions.add(decide)

    for username, spec in DEMO_CUSTOMERS.items():
        user, made = user_model.objects.get_or_create(username=username, defaults={"email": spec["email"]})
        if made:
            user.set_password(DEMO_PASSWORD)
            user.save(update_fields=["password"])
        customer, made = Customer.objects.get_or_create(
            user=user,
            defaults={"name": spec["name"], "email": spec["email"], "requires_refund_approval": spec["flagged"]},
        )
        created["customers"] += int(made)
        for demo in spec["orders"]:
            total = sum(qty * price for _, _, qty, price in demo.lines)
            placed = now - timedelta(days=demo.days_ago)
            order, made = Order.objects.get_or_create(
                number=demo.number,
                defaults={
                    "customer": customer,
                    "status": demo.status,
                    "total_cents": total,
                    "currency": "usd",
                    "payment_reference": "" if demo.status == OrderStatus.PENDING else f"pi_demo_{demo.number}",
                    "placed_at": placed,
                    "shipped_at": placed + timedelta(days=1)
                    if demo.status in {OrderStatus.SHIPPED, OrderStatus.DELIVERED}
                    else None,
                    "delivered_at": placed + timedelta(days=3) if demo.status == OrderStatus.DELIVERED else None,
                },
            )
            if made:
                created["orders"] += 1
                for sku, description, qty, price in demo.lines:
                    OrderLine.objects.create(
                        order=order, sku=sku, description=description, quantity=qty, unit_price_cents=price
                    )

    for slug, title, body in HELP_ARTICLES:
        _, made = HelpArticle.objects.get_or_create(slug=slug, defaults={"title": title, "body": body})
        created["articles"] += int(made)
    return created
