"""The sandbox answers a request it cannot store or read with Stripe's 400 (413 for a body past its
limit), never its own 500: a NUL character in a value (PostgreSQL's text and jsonb hold none; a form
may carry one as %00), a JSON body that is not an object or is nested past reason, a control
request's metadata that is not a JSON object. Nothing is stored, and a key the request came under
is free for the corrected request."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest

from tests.payments.test_provider import AUTH, PAYMENT, http

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def raw(sandbox, method: str, path: str, body: bytes, headers: dict[str, str]):  # noqa: ANN001, ANN201
    request = urllib.request.Request(sandbox.base_url + path, data=body, method=method, headers=headers)
    try:
        with _opener.open(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize(
    ("method", "path", "form"),
    [
        ("POST", "/v1/refunds", {"payment_intent": PAYMENT + "\x00", "amount": "100"}),
        ("POST", "/v1/refunds", {"payment_intent": PAYMENT, "amount": "100", "metadata[ticket]": "4\x002"}),
        ("POST", "/v1/refunds", {"payment_intent": PAYMENT, "amount": "100", "metadata[t\x00]": "42"}),
        ("POST", "/v1/payment_intents", {"amount": "100", "currency": "usd", "metadata[k]": "a\x00"}),
        ("GET", "/v1/refunds?starting_after=re_%00x", None),
        ("GET", "/v1/refunds?metadata%5Bticket%5D=4%002", None),
        ("GET", "/v1/refunds/search?query=metadata%5B%27ticket%27%5D%3A%274%002%27", None),
    ],
    ids=["payment-intent", "metadata-value", "metadata-key", "payment-metadata", "cursor", "list-filter", "search"],
)
def test_a_nul_character_anywhere_is_refused_with_stripes_400_and_nothing_is_stored(
    payment_sandbox, method, path, form
):  # noqa: ANN001
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")
    headers = {**AUTH, "Idempotency-Key": "nul-1"} if method == "POST" else AUTH

    status, _, body = http(payment_sandbox, method, path, form, headers)

    assert status == 400, (status, body)
    assert body["error"]["type"] == "invalid_request_error" and "NUL" in body["error"]["message"]
    assert payment_sandbox.refunds() == []
    assert payment_sandbox.idempotency_keys() == []  # the corrected request may use the key


def test_the_key_of_a_refused_request_refunds_once_when_sent_again_corrected(payment_sandbox):  # noqa: ANN001
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")
    headers = {**AUTH, "Idempotency-Key": "nul-2"}
    form = {"payment_intent": PAYMENT, "amount": "100"}
    http(payment_sandbox, "POST", "/v1/refunds", {**form, "metadata[ticket]": "\x00"}, headers)

    status, _, body = http(payment_sandbox, "POST", "/v1/refunds", form, headers)

    assert status == 200, (status, body)
    assert [r["amount"] for r in payment_sandbox.refunds()] == [100]


@pytest.mark.parametrize(
    "body",
    [b"[1, 2]", b'"refund"', b"3", b"null", b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
     b'{"payment_intent": "pi_demo_A-1001", "amount": "100", "reason": "\\ud800"}'],
    ids=["list", "string", "number", "null", "deep", "lone-surrogate"],
)  # fmt: skip
def test_a_json_body_that_is_not_an_object_of_storable_values_is_a_400(payment_sandbox, body):  # noqa: ANN001
    payment_sandbox.seed_payment(PAYMENT, 2900, "usd")

    status, answer = raw(payment_sandbox, "POST", "/v1/refunds", body, {**AUTH, "Content-Type": "application/json"})

    assert status == 400, (status, answer)
    assert answer["error"]["type"] == "invalid_request_error"
    assert payment_sandbox.refunds() == []


@pytest.mark.parametrize("metadata", ["{", "[1]", '"text"', '{"k": 1}'], ids=["broken", "list", "string", "number"])
def test_a_seeded_payments_metadata_must_be_a_json_object_of_strings(payment_sandbox, metadata):  # noqa: ANN001
    form = {"id": "pi_seeded", "amount": "100", "currency": "usd", "metadata": metadata}

    status, _, body = http(payment_sandbox, "POST", "/_sandbox/payment_intents", form)

    assert status == 400, (status, body)
    assert body["error"]["param"] == "metadata"
    status, _, _ = http(payment_sandbox, "GET", "/v1/payment_intents/pi_seeded", headers=AUTH)
    assert status == 404


def test_a_body_past_the_limit_is_a_413_and_is_not_read(payment_sandbox):  # noqa: ANN001
    """A Content-Length far past any Stripe request is answered at once, without reading (or waiting
    for) the body; a negative one is a 400, not a read that waits for the connection to close."""
    host, port = payment_sandbox.base_url.removeprefix("http://").split(":")
    for length, expected in [(10**12, 413), (-1, 400)]:
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            conn.sendall(
                f"POST /v1/refunds HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk_test_x\r\n"
                f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {length}\r\n\r\n".encode()
            )
            head = conn.recv(65536).decode("latin-1")
        assert head.startswith(f"HTTP/1.1 {expected} "), head[:200]
    assert payment_sandbox.refunds() == []


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_a_method_the_api_does_not_use_is_answered_in_stripes_shape(payment_sandbox, method):  # noqa: ANN001
    """http.server answered them with its own HTML 501 page; Stripe answers an unknown route in JSON."""
    status, body = raw(payment_sandbox, method, "/v1/refunds", b"amount=1", AUTH)

    assert status == 404, (status, body)
    assert body["error"]["type"] == "invalid_request_error" and method in body["error"]["message"]
