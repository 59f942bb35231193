"""A refund tried again goes to the order it was first sent for, never to another the same words name later.

Staff approve $300.00 on "K-100" (the model wrote "k-100"; the card showed K-100). The first send finds
the payment provider out of reach: the refund stays submitted under its key, and the run tries it again
after the outage's backoff. Meanwhile the shop records another order of the customer numbered "k-100",
exactly as the model wrote it. The retry looked the order up from the model's number again and sent the
refund, under its key, to that other order's payment, which nobody approved a refund on.

The provider is the payment sandbox (a separate process, over HTTP), reached through a proxy the test cuts.
"""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from agents.models import AgentRun, Refund, RefundStatus
from agents.runner import advance
from tests.agents.test_approval_pays_the_order_its_card_showed import approve, refund_on_k100_waiting
from tests.agents.test_money_path import order_for, paid
from tests.workers import TcpProxy

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


@pytest.fixture
def provider_proxy(sandbox, settings):  # noqa: ANN001, ANN201
    from agents import refunds as refund_module

    target = urlparse(sandbox.base_url)
    proxy = TcpProxy(target.hostname, target.port).up()
    settings.STRIPE_API_BASE = f"http://127.0.0.1:{proxy.port}"
    settings.PAYMENTS_TIMEOUT_SECONDS = "3"
    refund_module._provider = None
    yield proxy
    proxy.down()
    refund_module._provider = None


def test_a_refund_tried_again_is_sent_for_its_own_order_not_the_one_its_number_names_now(sandbox, provider_proxy):  # noqa: ANN001
    customer, shown, ticket, model, approval = refund_on_k100_waiting(sandbox)
    approve(approval)

    provider_proxy.down()
    advance(ticket.pk, model=model)  # the first send: the provider is out of reach
    [refund] = Refund.objects.filter(ticket=ticket)
    assert (refund.status, refund.order_id) == (RefundStatus.SUBMITTED, shown.pk)

    other = order_for(customer, "k-100", 64900, sandbox)  # recorded by the shop while the refund waited
    provider_proxy.up()
    AgentRun.objects.filter(ticket=ticket).update(retry_not_before=None)  # the outage's backoff is over
    advance(ticket.pk, model=model)

    assert paid(sandbox, other) == [], "the refund approved on K-100 was paid on k-100"
    assert [r["amount"] for r in paid(sandbox, shown)] == [30000]
    refund.refresh_from_db()
    assert (refund.status, refund.order_id) == (RefundStatus.SUCCEEDED, shown.pk)
