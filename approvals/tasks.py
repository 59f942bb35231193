from __future__ import annotations

from celery import shared_task

from support.celery import BeatRound


@shared_task(name="approvals.expire_due", base=BeatRound)
def expire_due() -> dict[str, int]:
    """Expire overdue approval requests and remind staff of those about to expire."""
    from approvals.services import approvals_expire_due

    return approvals_expire_due()
