"""Refunds through the adapter and the official SDK, against a real sandbox process over HTTP."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
import stripe

from payments.provider import (
    IdempotencyMismatch,
    PaymentProvider,
    ProviderDeclined,
    ProviderError,
    ProviderRefund,
    ProviderUncertain,
)
from payments.sandbox_process import SandboxProcess

PAYMENT = "pi_demo_A-1001"

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def refund(provider: PaymentProvider, key: str, amount: int = 1000, currency: str = "usd") -> ProviderRefund:
    return provider.create_refund(
        payment_reference=PAYMENT,
        amount_cents=amount,
        currency=currency,
        idempotency_key=key,
        metadata={"ticket": "42"},
    )


def in_background(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except Exception as exc:  # the test inspects it
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def key_states(sandbox: SandboxProcess) -> list[str]:
    return [row["state"] for row in sandbox.idempotency_keys()]


def http(
    sandbox: SandboxProcess,
    method: str,
    path: str,
    form: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], dict[str, Any]]:
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    request = urllib.request.Request(sandbox.base_url + path, data=data, method=method, headers=headers or {})
    try:
        with _opener.open(request, timeout=10) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


AUTH = {"Authorization": "Bearer sk_test_pytest"}


# --- the happy path and idempotency ---------------------------------------------------------


def test_a_refund_succeeds_and_the_sandbox_lists_it(payment_sandbox, provider):
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")

    made = refund(provider, "ticket-1/call-1", amount=1200)

    assert made.id.startswith("re_")
    assert (made.amount_cents, made.currency, made.status, made.payment_reference) == (
        1200,
        "usd",
        "succeeded",
        PAYMENT,
    )
    assert dict(made.metadata) == {"ticket": "42", "idempotency_key": "ticket-1/call-1"}
    [stored] = payment_sandbox.refunds()
    assert (stored["id"], stored["amount"], stored["payment_intent"]) == (made.id, 1200, PAYMENT)
    assert provider.list_refunds(payment_reference=PAYMENT) == [made]
    assert provider.find_refund(idempotency_key="ticket-1/call-1") == made


def test_the_same_idempotency_key_twice_gives_one_refund_with_the_same_id(payment_sandbox, provider):
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")

    first = refund(provider, "ticket-1/call-2")
    second = refund(provider, "ticket-1/call-2")

    assert second == first
    assert [r["id"] for r in payment_sandbox.refunds()] == [first.id]


def test_a_key_the_sandbox_was_told_to_expire_is_forgotten_as_stripe_forgets_it_after_24_hours(
    payment_sandbox, provider
):
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")
    first = refund(provider, "ticket-1/call-3")

    assert payment_sandbox.expire_idempotency_keys() == 0  # a key used a moment ago is kept a day
    assert refund(provider, "ticket-1/call-3") == first
    assert payment_sandbox.expire_idempotency_keys(older_than_seconds=0) == 1  # as if a day had passed
    assert payment_sandbox.idempotency_keys() == []
    again = refund(provider, "ticket-1/call-3")

    # Stripe no longer knows the key: the same request is a new one, and refunds a second time.
    assert again.id != first.id
    assert [r["id"] for r in payment_sandbox.refunds()] == [first.id, again.id]
    assert [r["state"] for r in payment_sandbox.idempotency_keys()] == ["done"]


def test_a_replayed_response_is_the_original_marked_idempotent_replayed(payment_sandbox):
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")
    form = {"payment_intent": PAYMENT, "amount": "500", "metadata[idempotency_key]": "raw-1"}
    headers = {**AUTH, "Idempotency-Key": "raw-1"}

    status, first_headers, first_body = http(payment_sandbox, "POST", "/v1/refunds", form, headers)
    replay_status, replay_headers, replay_body = http(payment_sandbox, "POST", "/v1/refunds", form, headers)

    assert (status, replay_status) == (200, 200)
    assert "Idempotent-Replayed" not in first_headers
    assert replay_headers["Idempotent-Replayed"] == "true"
    assert replay_headers["Original-Request"] == first_headers["Request-Id"]
    assert replay_body == first_body


def test_reusing_a_key_with_a_different_amount_raises_idempotency_mismatch(payment_sandbox, provider):
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")
    refund(provider, "ticket-1/call-3", amount=1000)

    with pytest.raises(IdempotencyMismatch, match="same parameters"):
        refund(provider, "ticket-1/call-3", amount=1100)

    assert [r["amount"] for r in payment_sandbox.refunds()] == [1000]


# --- declines ------------------------------------------------------------------------------


def test_refunding_more_than_remains_is_declined_with_a_readable_message(payment_sandbox, provider):
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")
    refund(provider, "ticket-1/call-4", amount=2000)

    with pytest.raises(ProviderDeclined) as declined:
        refund(provider, "ticket-1/call-5", amount=1000)

    assert declined.value.code == "amount_too_large"
    assert str(declined.value) == (
        "Refund amount ($10.00) is greater than the unrefunded amount on payment pi_demo_A-1001 ($9.00)."
    )
    assert [r["amount"] for r in payment_sandbox.refunds()] == [2000]


def test_a_fully_refunded_payment_declines_another_refund(payment_sandbox, provider):
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")
    refund(provider, "ticket-1/call-6", amount=2900)

    with pytest.raises(ProviderDeclined, match="already been refunded in full") as declined:
        refund(provider, "ticket-1/call-7", amount=1)

    assert declined.value.code == "charge_already_refunded"


def test_refunding_an_unknown_payment_is_declined(payment_sandbox, provider):
    with pytest.raises(ProviderDeclined, match="No such payment_intent: 'pi_demo_A-1001'"):
        refund(provider, "ticket-1/call-8")


def test_refunding_in_another_currency_than_paid_is_declined_before_anything_is_sent(payment_sandbox, provider):
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")

    with pytest.raises(ProviderDeclined, match="was made in USD; it cannot be refunded in EUR") as declined:
        refund(provider, "ticket-1/call-9", currency="eur")

    assert declined.value.code == "currency_mismatch"
    assert payment_sandbox.idempotency_keys() == []


def test_concurrent_refunds_under_different_keys_never_exceed_the_payment(payment_sandbox, provider):
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")
    payment_sandbox.fault("latency:300", count=2)  # both hold their keys at the same time, then race

    runs = [in_background(lambda key=key: refund(provider, key, amount=2000)) for key in ("race-a", "race-b")]
    for thread, _ in runs:
        thread.join(10)

    outcomes = [outcome for _, outcome in runs]
    assert sorted(type(o.get("result") or o.get("error")).__name__ for o in outcomes) == [
        "ProviderDeclined",
        "ProviderRefund",
    ]
    assert [r["amount"] for r in payment_sandbox.refunds()] == [2000]


# --- faults: the outcome is unknown, reconciliation tells -----------------------------------


def test_an_error_before_commit_is_uncertain_finds_nothing_and_a_retry_refunds_once(payment_sandbox, provider):
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")
    payment_sandbox.fault("error_before_commit")

    with pytest.raises(ProviderUncertain):
        refund(provider, "ticket-2/call-1")

    assert provider.find_refund(idempotency_key="ticket-2/call-1") is None
    assert payment_sandbox.refunds() == []
    retried = refund(provider, "ticket-2/call-1")
    assert refund(provider, "ticket-2/call-1") == retried
    assert [r["id"] for r in payment_sandbox.refunds()] == [retried.id]


@pytest.mark.parametrize("fault", ["error_after_commit", "drop_after_commit"])
def test_a_failure_after_commit_is_uncertain_and_reconciliation_finds_the_one_refund(payment_sandbox, provider, fault):
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")
    payment_sandbox.fault(fault)

    with pytest.raises(ProviderUncertain):
        refund(provider, "ticket-2/call-2", amount=700)

    found = provider.find_refund(idempotency_key="ticket-2/call-2")
    assert found is not None
    assert (found.amount_cents, found.payment_reference) == (700, PAYMENT)
    assert provider.find_refund(idempotency_key="ticket-2/call-2", payment_reference=PAYMENT) == found
    assert refund(provider, "ticket-2/call-2", amount=700) == found
    assert [r["id"] for r in payment_sandbox.refunds()] == [found.id]


def test_a_refund_slower_than_the_client_timeout_is_uncertain_and_found_later(payment_sandbox, provider):
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")
    impatient = PaymentProvider(api_key="sk_test_pytest", api_base=payment_sandbox.base_url, timeout_seconds=0.5)
    payment_sandbox.fault("latency:1500")

    with pytest.raises(ProviderUncertain):
        refund(impatient, "ticket-2/call-3")

    wait_for(lambda: provider.find_refund(idempotency_key="ticket-2/call-3") is not None)
    assert len(payment_sandbox.refunds()) == 1


def test_concurrent_requests_under_one_key_make_one_refund_and_the_other_is_uncertain(payment_sandbox, provider):
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")
    payment_sandbox.fault("latency:1500")
    thread, first = in_background(lambda: refund(provider, "ticket-3/call-1"))
    wait_for(lambda: key_states(payment_sandbox) == ["in_flight"])

    with pytest.raises(ProviderUncertain, match="in flight"):
        refund(provider, "ticket-3/call-1")

    thread.join(10)
    assert "error" not in first, first
    assert refund(provider, "ticket-3/call-1") == first["result"]
    assert [r["id"] for r in payment_sandbox.refunds()] == [first["result"].id]


# --- restarts and crashes of the sandbox ------------------------------------------------------


def test_the_sandbox_keeps_its_records_across_a_restart_and_replays_the_original(payment_sandbox, provider):
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")
    original = refund(provider, "ticket-4/call-1")
    old_pid = payment_sandbox.pid

    payment_sandbox.restart(crash=True)

    assert payment_sandbox.pid != old_pid
    assert refund(provider, "ticket-4/call-1") == original
    assert provider.find_refund(idempotency_key="ticket-4/call-1") == original
    assert [r["id"] for r in payment_sandbox.refunds()] == [original.id]


def test_a_refund_cut_off_by_a_sandbox_crash_leaves_nothing_and_the_key_can_be_retried(payment_sandbox, provider):
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")
    payment_sandbox.fault("latency:5000")
    thread, first = in_background(lambda: refund(provider, "ticket-4/call-2"))
    wait_for(lambda: key_states(payment_sandbox) == ["in_flight"])

    payment_sandbox.kill()
    thread.join(10)
    payment_sandbox.start()

    assert isinstance(first.get("error"), ProviderUncertain)
    assert provider.find_refund(idempotency_key="ticket-4/call-2") is None
    assert key_states(payment_sandbox) == ["in_flight"]  # the dead request's claim, taken over below
    retried = refund(provider, "ticket-4/call-2")
    assert [r["id"] for r in payment_sandbox.refunds()] == [retried.id]
    assert key_states(payment_sandbox) == ["done"]


def test_a_sandbox_started_with_a_seed_has_the_payment_and_stops_cleanly_on_sigterm(
    sandbox_database_url, payment_sandbox, tmp_path
):
    own = SandboxProcess(
        database_url=sandbox_database_url, seeds=("pi_demo_B-2001:64900:usd",), log_path=tmp_path / "sandbox.log"
    )
    own.start()
    try:
        payment = PaymentProvider(api_key="sk_test_pytest", api_base=own.base_url).get_payment("pi_demo_B-2001")
    finally:
        code = own.stop(timeout=10)

    assert (payment.amount_cents, payment.currency, payment.status) == (64900, "usd", "succeeded")
    assert code == 0
    assert "stopped" in (tmp_path / "sandbox.log").read_text()


# --- the wire: Stripe's shapes, as the SDK and curl see them ----------------------------------


def test_a_request_without_an_api_key_is_refused_in_stripes_error_shape(payment_sandbox):
    status, _, body = http(payment_sandbox, "GET", "/v1/refunds")

    assert status == 401
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("You did not provide an API key.")


def test_the_sdk_creates_a_succeeded_payment_intent_in_the_sandbox(payment_sandbox, provider):
    client = stripe.StripeClient(
        "sk_test_pytest", base_addresses={"api": payment_sandbox.base_url}, max_network_retries=0
    )

    intent = client.v1.payment_intents.create({"amount": 4999, "currency": "usd", "metadata": {"order": "A-1002"}})

    assert (intent.status, intent.metadata["order"]) == ("succeeded", "A-1002")
    assert provider.get_payment(intent.id).amount_cents == 4999


def test_refunds_can_be_searched_by_metadata_and_paged_newest_first(payment_sandbox, provider):
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")
    older = refund(provider, "ticket-5/call-1", amount=100)
    newer = refund(provider, "ticket-5/call-2", amount=200)

    query = urllib.parse.urlencode({"query": "metadata['idempotency_key']:'ticket-5/call-1'"})
    _, _, found = http(payment_sandbox, "GET", f"/v1/refunds/search?{query}", headers=AUTH)
    _, _, first_page = http(payment_sandbox, "GET", f"/v1/refunds?payment_intent={PAYMENT}&limit=1", headers=AUTH)
    _, _, second_page = http(
        payment_sandbox, "GET", f"/v1/refunds?payment_intent={PAYMENT}&limit=1&starting_after={newer.id}", headers=AUTH
    )

    assert [r["id"] for r in found["data"]] == [older.id]
    assert ([r["id"] for r in first_page["data"]], first_page["has_more"]) == ([newer.id], True)
    assert ([r["id"] for r in second_page["data"]], second_page["has_more"]) == ([older.id], False)
    assert [r.id for r in provider.list_refunds(payment_reference=PAYMENT)] == [newer.id, older.id]


def test_a_fault_header_applies_to_that_request_only(payment_sandbox):
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")
    form = {"payment_intent": PAYMENT, "amount": "500"}
    headers = {**AUTH, "Idempotency-Key": "raw-2"}

    status, _, body = http(
        payment_sandbox, "POST", "/v1/refunds", form, {**headers, "X-Sandbox-Fault": "error_before_commit"}
    )
    retry_status, _, _ = http(payment_sandbox, "POST", "/v1/refunds", form, headers)

    assert (status, body["error"]["type"]) == (500, "api_error")
    assert retry_status == 200
    assert len(payment_sandbox.refunds()) == 1


# --- configuration ----------------------------------------------------------------------------


def test_the_provider_reads_its_configuration_from_settings(settings, monkeypatch):
    monkeypatch.setenv("STRIPE_API_KEY", "sk_test_from_the_environment_is_ignored")
    settings.STRIPE_API_BASE = "http://127.0.0.1:1"
    settings.PAYMENTS_TIMEOUT_SECONDS = "2.5"
    settings.STRIPE_API_KEY = "sk_test_from_settings"

    configured = PaymentProvider()

    assert (configured.api_key, configured.api_base, configured.timeout_seconds) == (
        "sk_test_from_settings",
        "http://127.0.0.1:1",
        2.5,
    )


def test_an_unreachable_provider_is_uncertain_not_declined():
    unreachable = PaymentProvider(api_key="sk_test_pytest", api_base="http://127.0.0.1:1", timeout_seconds=1)

    with pytest.raises(ProviderUncertain):
        unreachable.find_refund(idempotency_key="anything")
    with pytest.raises(ProviderUncertain):
        refund(unreachable, "anything")


def test_a_rejected_api_key_is_a_configuration_error_neither_declined_nor_uncertain(payment_sandbox):
    live_key = PaymentProvider(api_key="sk_live_oops", api_base=payment_sandbox.base_url)

    with pytest.raises(ProviderError, match="rejected our API key") as rejected:
        live_key.get_payment(PAYMENT)

    assert not isinstance(rejected.value, ProviderDeclined | ProviderUncertain)
