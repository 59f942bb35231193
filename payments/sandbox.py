"""A local Stripe-compatible payment sandbox, run as its own process with its own storage.

    python -m payments.sandbox --port 12111 [--database-url URL] [--seed pi_demo_A-1001:2900:usd ...]

It speaks the subset of the Stripe API the app uses (form-encoded requests, JSON
responses, Stripe's error shape and idempotency semantics) so that the official
``stripe`` SDK can be pointed at it. Its records live in the PostgreSQL schema
``payments_sandbox`` (created on start), reached with psycopg directly: the app's
tables and the sandbox's tables are different stores, so "the provider refunded
but we did not record it" is a real window that tests can hit.

The sandbox is one account: every ``sk_test_...`` key sees the same objects and
the same idempotency keys. Keys are kept until told otherwise: Stripe prunes them once they are
24 hours old, and ``POST /_sandbox/idempotency_keys/expire`` does the same here on demand (a request
sent again under a forgotten key is a new request, and refunds again).

API (``Authorization: Bearer sk_test_...`` required)::

    POST /v1/payment_intents               amount, currency, metadata[...] -> a succeeded payment
    GET  /v1/payment_intents/{id}
    POST /v1/refunds                       payment_intent, amount (default: the rest), reason, metadata[...]
    GET  /v1/refunds/{id}
    GET  /v1/refunds                       payment_intent, limit, starting_after, ending_before,
                                           metadata[key]=value (a sandbox extension; Stripe has no such filter)
    GET  /v1/refunds/search                query=metadata['key']:'value' [AND ...], limit, page

Control (no auth; for tests and ``make run``)::

    GET    /_sandbox/health
    POST   /_sandbox/payment_intents      id, amount, currency[, metadata]: seed a payment with a fixed id
    POST   /_sandbox/reset                 delete every record and queued fault
    GET    /_sandbox/refunds               every refund, oldest first
    GET    /_sandbox/idempotency_keys      every idempotency record with its state
    POST   /_sandbox/idempotency_keys/expire  [older_than_seconds=86400]: forget the finished keys first
                                           used at least that long ago, as Stripe does after 24 hours
                                           (0: every finished key); the refunds made under them stay
    POST   /_sandbox/faults                mode, [method=POST], [path=/v1/refunds], [count=1]: queue a fault
    GET    /_sandbox/faults                the queue;  DELETE /_sandbox/faults  clears it

Fault modes (queued, or for one request with the header ``X-Sandbox-Fault: MODE``):
``latency:<ms>`` (sleep while holding the idempotency key), ``error_before_commit``
(500, nothing stored), ``rate_limited`` (429, Stripe's ``rate_limit``: nothing stored or
claimed), ``error_after_commit`` (store the result, then 500),
``drop_after_commit`` (store the result, then close the socket without a response),
``refund_status:<status>`` (the refund is created with that Stripe status: ``pending``,
``requires_action``, ``failed`` or ``canceled``, as a bank may answer).

A refund left ``pending`` or ``requires_action`` is settled later, as the bank would, with
``POST /_sandbox/refunds/{id}/settle`` and ``status=succeeded|failed|canceled``.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import json
import logging
import os
import re
import secrets
import signal
import socket
import string
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from tickets.money import amount_step, format_money

log = logging.getLogger("payments.sandbox")

SCHEMA = "payments_sandbox"


# Advisory-lock ids are database-wide; derive ours from a namespaced hash so they
# cannot meet the app's own locks by accident.
def _lock_id(name: bytes) -> int:
    return int.from_bytes(hashlib.sha256(b"payments_sandbox:" + name).digest()[:8], "big", signed=True)


_DDL_LOCK_ID = _lock_id(b"ddl")

DDL = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE IF NOT EXISTS {SCHEMA}.payment_intents (
    id text PRIMARY KEY,
    amount bigint NOT NULL CHECK (amount > 0),
    currency text NOT NULL CHECK (currency ~ '^[a-z]{{3}}$'),
    status text NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{{}}',
    created timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.refunds (
    seq bigserial UNIQUE,
    id text PRIMARY KEY,
    payment_intent text NOT NULL REFERENCES {SCHEMA}.payment_intents (id) ON DELETE CASCADE,
    amount bigint NOT NULL CHECK (amount > 0),
    currency text NOT NULL,
    status text NOT NULL,
    reason text,
    metadata jsonb NOT NULL DEFAULT '{{}}',
    created timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS refunds_payment_intent_seq ON {SCHEMA}.refunds (payment_intent, seq);
CREATE TABLE IF NOT EXISTS {SCHEMA}.idempotency_keys (
    key text PRIMARY KEY,
    request_hash text NOT NULL,
    method text NOT NULL,
    path text NOT NULL,
    state text NOT NULL CHECK (state IN ('in_flight', 'done')),
    request_id text NOT NULL,
    response_status integer,
    response_body text,
    created timestamptz NOT NULL DEFAULT now(),
    finished timestamptz,
    CHECK ((state = 'done') = (response_status IS NOT NULL AND response_body IS NOT NULL))
);
"""

REFUND_REASONS = {"duplicate", "fraudulent", "requested_by_customer"}
MAX_IDEMPOTENCY_KEY_LENGTH = 255
# Far past any request the app or the SDK sends (a refund is a few hundred bytes); Stripe refuses big bodies too.
MAX_BODY_BYTES = 1024 * 1024
FAULT_KINDS = {
    "latency", "error_before_commit", "rate_limited", "error_after_commit", "drop_after_commit", "refund_status",
}  # fmt: skip
# Stripe's refund statuses: the ones a refund can be created with by a fault, and settled to.
UNSETTLED_REFUND_STATUSES = {"pending", "requires_action"}
CREATED_REFUND_STATUSES = UNSETTLED_REFUND_STATUSES | {"failed", "canceled"}
SETTLED_REFUND_STATUSES = {"succeeded", "failed", "canceled"}
# Refunds that count against what a payment can still refund.
HOLDING_REFUND_STATUSES = ("succeeded", "pending", "requires_action")
_ID_ALPHABET = string.ascii_letters + string.digits


def new_id(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


def connect(database_url: str) -> psycopg.Connection[dict[str, Any]]:
    return psycopg.connect(database_url, autocommit=True, row_factory=dict_row, connect_timeout=10)


def ensure_schema(database_url: str) -> None:
    """Create the sandbox's schema and tables if missing; safe when several sandboxes start at once."""
    with connect(database_url) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [_DDL_LOCK_ID])
        conn.execute(DDL)


# --- Errors and responses ----------------------------------------------------------


@dataclass
class Response:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, status: int, payload: Any, headers: dict[str, str] | None = None) -> Response:
        return cls(status, json.dumps(payload, indent=2, default=str).encode(), dict(headers or {}))


class ApiError(Exception):
    """An error answered in Stripe's shape: ``{"error": {"type", "message", "code", "param"}}``.

    ``store`` says whether an idempotent request keeps this answer under its key.
    Like Stripe, we keep the answers of requests that began executing (a refund
    declined for its amount) and forget requests that failed validation, so that
    a corrected retry is possible.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        store: bool = False,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.param = param
        self.store = store
        self.headers = headers or {}

    def response(self) -> Response:
        error: dict[str, Any] = {"type": self.type, "message": self.message}
        if self.code:
            error["code"] = self.code
        if self.param:
            error["param"] = self.param
        return Response.json(self.status, {"error": error}, self.headers)


def missing(param: str) -> ApiError:
    return ApiError(400, f"Missing required param: {param}.", code="parameter_missing", param=param)


def api_error_500(message: str) -> Response:
    return ApiError(500, message, type_="api_error").response()


# --- Form parsing (Stripe's bracket encoding) -----------------------------------------

_PARAM_NAME = re.compile(r"^([^\[\]]+)(?:\[([^\[\]]*)\])?$")


def parse_params(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """``a=1&metadata[k]=v&expand[]=x`` -> ``{"a": "1", "metadata": {"k": "v"}, "expand": ["x"]}``."""
    params: dict[str, Any] = {}
    for name, value in pairs:
        match = _PARAM_NAME.match(name)
        if match is not None and not name.isprintable():
            # A name no client of Stripe's sends (a NUL, a line break): refused, never read. The sandbox
            # keeps its own instructions under such names (_STATUS_PARAM), out of a request's reach.
            match = None
        if match is None:
            raise ApiError(400, f"Invalid parameter name: {name!r} (the sandbox supports one level of nesting).")
        outer, inner = match.group(1), match.group(2)
        if inner is None:
            params[outer] = value
        elif inner == "":
            params.setdefault(outer, [])
            if not isinstance(params[outer], list):
                raise ApiError(400, f"Invalid array: {outer}", param=outer)
            params[outer].append(value)
        else:
            if params.get(outer) == "":
                params[outer] = {}
            params.setdefault(outer, {})
            if not isinstance(params[outer], dict):
                raise ApiError(400, f"Invalid hash: {outer}", param=outer)
            params[outer][inner] = value
    return params


def request_hash(method: str, path: str, pairs: list[tuple[str, str]]) -> str:
    canonical = json.dumps([method, path, sorted(pairs)])
    return hashlib.sha256(canonical.encode()).hexdigest()


# The largest amount a column of the sandbox holds (bigint); Stripe's own limits are far below it.
MAX_AMOUNT = 2**63 - 1


def int_param(params: dict[str, Any], name: str, *, required: bool) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        if required:
            raise missing(name)
        return None
    # ASCII digits only: Python's \d and int() also read "５０" or "١٠" as numbers, which Stripe refuses.
    if not isinstance(raw, str) or not re.fullmatch(r"[0-9]{1,19}", raw) or not 0 < int(raw) <= MAX_AMOUNT:
        raise ApiError(400, f"Invalid positive integer: {name}", code="parameter_invalid_integer", param=name)
    return int(raw)


def str_param(params: dict[str, Any], name: str, *, required: bool) -> str | None:
    raw = params.get(name)
    if raw is None or raw == "":
        if required:
            raise missing(name)
        return None
    if not isinstance(raw, str):
        raise ApiError(400, f"Invalid string: {name}", param=name)
    return raw


def currency_param(params: dict[str, Any], *, required: bool) -> str | None:
    raw = str_param(params, "currency", required=required)
    if raw is None:
        return None
    if not re.fullmatch(r"[A-Za-z]{3}", raw):
        raise ApiError(400, f"Invalid currency: {raw}.", code="parameter_invalid_string", param="currency")
    return raw.lower()


def metadata_param(params: dict[str, Any]) -> dict[str, str]:
    raw = params.get("metadata", {})
    if raw == "":
        return {}
    if not isinstance(raw, dict):
        raise ApiError(400, "Invalid metadata: must be a hash of keys to strings.", param="metadata")
    # An empty value unsets a key in Stripe; on create that means "not set".
    metadata = {key: value for key, value in raw.items() if value != ""}
    if len(metadata) > 50:
        raise ApiError(400, "Metadata can have at most 50 keys.", param="metadata")
    for key, value in metadata.items():
        if len(key) > 40:
            raise ApiError(400, f"Metadata keys can be at most 40 characters: {key!r}.", param="metadata")
        if len(value) > 500:
            raise ApiError(400, f"Metadata values can be at most 500 characters (key {key!r}).", param="metadata")
    return metadata


def limit_param(params: dict[str, Any]) -> int:
    raw = params.get("limit")
    if raw is None or raw == "":
        return 10
    if not isinstance(raw, str) or not re.fullmatch(r"[0-9]{1,3}", raw) or not 1 <= int(raw) <= 100:
        raise ApiError(400, "Invalid limit: must be an integer between 1 and 100.", param="limit")
    return int(raw)


# --- Objects ---------------------------------------------------------------------------


def _unix(moment: datetime) -> int:
    return int(moment.timestamp())


def payment_intent_json(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "object": "payment_intent",
        "amount": row["amount"],
        "amount_capturable": 0,
        "amount_received": row["amount"],
        "capture_method": "automatic",
        "created": _unix(row["created"]),
        "currency": row["currency"],
        "latest_charge": None,
        "livemode": False,
        "metadata": row["metadata"],
        "status": row["status"],
    }


def refund_json(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "object": "refund",
        "amount": row["amount"],
        "balance_transaction": None,
        "charge": None,
        "created": _unix(row["created"]),
        "currency": row["currency"],
        "metadata": row["metadata"],
        "payment_intent": row["payment_intent"],
        "reason": row["reason"],
        "receipt_number": None,
        "source_transfer_reversal": None,
        "status": row["status"],
        "transfer_reversal": None,
    }


# --- Storage operations -------------------------------------------------------------------

Conn = psycopg.Connection[dict[str, Any]]


def payment_seed(
    conn: Conn, *, payment_id: str, amount: int, currency: str, metadata: dict[str, str] | None = None
) -> dict[str, Any]:
    """Create a succeeded payment with a fixed id; seeding the same payment again is a no-op."""
    if not re.fullmatch(r"pi_[A-Za-z0-9_-]{1,240}", payment_id):
        raise ApiError(400, f"Invalid payment intent id {payment_id!r}: expected pi_ and letters, digits, - or _.")
    if amount <= 0:
        raise ApiError(400, "Invalid positive integer: amount", param="amount")
    currency = currency.lower()
    row = conn.execute(
        f"""INSERT INTO {SCHEMA}.payment_intents (id, amount, currency, status, metadata)
            VALUES (%s, %s, %s, 'succeeded', %s) ON CONFLICT (id) DO NOTHING RETURNING *""",
        [payment_id, amount, currency, Jsonb(metadata or {})],
    ).fetchone()
    if row is None:
        row = conn.execute(f"SELECT * FROM {SCHEMA}.payment_intents WHERE id = %s", [payment_id]).fetchone()
        assert row is not None
        if (row["amount"], row["currency"]) != (amount, currency):
            raise ApiError(
                409,
                f"Payment {payment_id} already exists with {format_money(row['amount'], row['currency'])}; "
                f"cannot seed it with {format_money(amount, currency)}.",
                code="resource_already_exists",
            )
    return payment_intent_json(row)


def refuse_off_step(amount: int, currency: str) -> None:
    """Stripe takes a three-decimal currency's amounts with a last digit of 0 only, and ISK's in whole
    krónur (multiples of 100): any other amount is refused, and nothing is stored."""
    step = amount_step(currency)
    if amount % step:
        raise ApiError(
            400,
            f"Invalid amount: amounts in {currency.upper()} must be evenly divisible by {step} "
            f"({format_money(step, currency)}). See https://stripe.com/docs/currencies#special-cases.",
            param="amount",
        )


def create_payment_intent(conn: Conn, params: dict[str, Any], match: re.Match[str]) -> Response:
    amount = int_param(params, "amount", required=True)
    currency = currency_param(params, required=True)
    assert amount is not None and currency is not None
    refuse_off_step(amount, currency)
    metadata = metadata_param(params)
    return Response.json(
        200, payment_seed(conn, payment_id=new_id("pi_"), amount=amount, currency=currency, metadata=metadata)
    )


def retrieve_payment_intent(conn: Conn, params: dict[str, Any], match: re.Match[str]) -> Response:
    row = conn.execute(f"SELECT * FROM {SCHEMA}.payment_intents WHERE id = %s", [match["id"]]).fetchone()
    if row is None:
        raise ApiError(404, f"No such payment_intent: '{match['id']}'", code="resource_missing", param="intent")
    return Response.json(200, payment_intent_json(row))


def create_refund(conn: Conn, params: dict[str, Any], match: re.Match[str]) -> Response:
    if params.get("charge") and not params.get("payment_intent"):
        raise ApiError(400, "The sandbox refunds payment intents only: pass payment_intent.", param="charge")
    payment_id = str_param(params, "payment_intent", required=True)
    amount = int_param(params, "amount", required=False)
    currency = currency_param(params, required=False)
    reason = str_param(params, "reason", required=False)
    if reason is not None and reason not in REFUND_REASONS:
        raise ApiError(400, f"Invalid reason: must be one of {', '.join(sorted(REFUND_REASONS))}.", param="reason")
    metadata = metadata_param(params)
    status = params.pop(_STATUS_PARAM, "succeeded")

    # The row lock serialises refunds of one payment, so two refunds under
    # different keys can never together exceed the amount paid.
    payment = conn.execute(f"SELECT * FROM {SCHEMA}.payment_intents WHERE id = %s FOR UPDATE", [payment_id]).fetchone()
    if payment is None:
        raise ApiError(404, f"No such payment_intent: '{payment_id}'", code="resource_missing", param="payment_intent")
    if currency is not None and currency != payment["currency"]:
        raise ApiError(
            400,
            f"Refunds must be in the payment's currency: {payment_id} was paid in "
            f"{payment['currency'].upper()}, not {currency.upper()}.",
            param="currency",
        )
    refunded = conn.execute(
        f"""SELECT coalesce(sum(amount), 0) AS total FROM {SCHEMA}.refunds
            WHERE payment_intent = %s AND status = ANY(%s)""",
        [payment_id, list(HOLDING_REFUND_STATUSES)],
    ).fetchone()
    assert refunded is not None
    remaining = payment["amount"] - int(refunded["total"])
    if remaining <= 0:
        raise ApiError(
            400,
            f"Payment {payment_id} has already been refunded in full "
            f"({format_money(payment['amount'], payment['currency'])}).",
            code="charge_already_refunded",
            store=True,
        )
    if amount is None:
        amount = remaining
    refuse_off_step(amount, payment["currency"])
    if amount > remaining:
        raise ApiError(
            400,
            f"Refund amount ({format_money(amount, payment['currency'])}) is greater than the unrefunded amount "
            f"on payment {payment_id} ({format_money(remaining, payment['currency'])}).",
            code="amount_too_large",
            param="amount",
            store=True,
        )
    row = conn.execute(
        f"""INSERT INTO {SCHEMA}.refunds (id, payment_intent, amount, currency, status, reason, metadata)
            VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING *""",
        [new_id("re_"), payment_id, amount, payment["currency"], status, reason, Jsonb(metadata)],
    ).fetchone()
    assert row is not None
    return Response.json(200, refund_json(row))


# A fault's way of telling create_refund which status to give the refund (never a form field).
_STATUS_PARAM = "\x00sandbox_status"


def settle_refund(conn: Conn, refund_id: str, status: str) -> dict[str, Any]:
    """Settle a pending refund, as the bank eventually does."""
    if status not in SETTLED_REFUND_STATUSES:
        raise ApiError(400, f"status must be one of {', '.join(sorted(SETTLED_REFUND_STATUSES))}.", param="status")
    row = conn.execute(f"SELECT * FROM {SCHEMA}.refunds WHERE id = %s FOR UPDATE", [refund_id]).fetchone()
    if row is None:
        raise ApiError(404, f"No such refund: '{refund_id}'", code="resource_missing", param="id")
    if row["status"] not in UNSETTLED_REFUND_STATUSES:
        raise ApiError(400, f"Refund {refund_id} is {row['status']}; only a pending refund can be settled.")
    row = conn.execute(
        f"UPDATE {SCHEMA}.refunds SET status = %s WHERE id = %s RETURNING *", [status, refund_id]
    ).fetchone()
    assert row is not None
    return refund_json(row)


def retrieve_refund(conn: Conn, params: dict[str, Any], match: re.Match[str]) -> Response:
    row = conn.execute(f"SELECT * FROM {SCHEMA}.refunds WHERE id = %s", [match["id"]]).fetchone()
    if row is None:
        raise ApiError(404, f"No such refund: '{match['id']}'", code="resource_missing", param="id")
    return Response.json(200, refund_json(row))


def _cursor_seq(conn: Conn, refund_id: str, param: str) -> int:
    row = conn.execute(f"SELECT seq FROM {SCHEMA}.refunds WHERE id = %s", [refund_id]).fetchone()
    if row is None:
        raise ApiError(400, f"No such refund: '{refund_id}'", code="resource_missing", param=param)
    return int(row["seq"])


def list_refunds(conn: Conn, params: dict[str, Any], match: re.Match[str]) -> Response:
    """Newest first, as Stripe lists, with cursor pagination."""
    limit = limit_param(params)
    where, args = ["true"], []
    payment_id = str_param(params, "payment_intent", required=False)
    if payment_id is not None:
        where.append("payment_intent = %s")
        args.append(payment_id)
    metadata = params.get("metadata")
    if metadata:
        if not isinstance(metadata, dict):
            raise ApiError(400, "Invalid metadata filter: use metadata[key]=value.", param="metadata")
        where.append("metadata @> %s")
        args.append(Jsonb(metadata))
    starting_after = str_param(params, "starting_after", required=False)
    ending_before = str_param(params, "ending_before", required=False)
    order = "DESC"
    if starting_after is not None:
        where.append("seq < %s")
        args.append(_cursor_seq(conn, starting_after, "starting_after"))
    elif ending_before is not None:
        where.append("seq > %s")
        args.append(_cursor_seq(conn, ending_before, "ending_before"))
        order = "ASC"
    rows = conn.execute(
        f"SELECT * FROM {SCHEMA}.refunds WHERE {' AND '.join(where)} ORDER BY seq {order} LIMIT %s",
        [*args, limit + 1],
    ).fetchall()
    has_more = len(rows) > limit
    rows = rows[:limit]
    if order == "ASC":
        rows.reverse()
    return Response.json(
        200, {"object": "list", "data": [refund_json(r) for r in rows], "has_more": has_more, "url": "/v1/refunds"}
    )


_SEARCH_CLAUSE = re.compile(r"""^\s*metadata\[(['"])(?P<key>.+?)\1\]\s*:\s*(['"])(?P<value>.*?)\3\s*$""")


def search_refunds(conn: Conn, params: dict[str, Any], match: re.Match[str]) -> Response:
    """Stripe search-query syntax, the metadata equality form only: ``metadata['k']:'v' AND ...``."""
    query = str_param(params, "query", required=True)
    assert query is not None
    wanted: dict[str, str] = {}
    for clause in re.split(r"\s+AND\s+", query.strip()):
        clause_match = _SEARCH_CLAUSE.match(clause)
        if clause_match is None:
            raise ApiError(
                400,
                f"Unsupported search query {query!r}: the sandbox supports metadata['key']:'value' "
                "clauses joined by AND.",
                param="query",
            )
        wanted[clause_match["key"]] = clause_match["value"]
    limit = limit_param(params)
    page = str_param(params, "page", required=False)
    after_seq = int(page) if page and re.fullmatch(r"[0-9]{1,18}", page) else None
    rows = conn.execute(
        f"""SELECT * FROM {SCHEMA}.refunds WHERE metadata @> %s AND (%s::bigint IS NULL OR seq < %s::bigint)
            ORDER BY seq DESC LIMIT %s""",
        [Jsonb(wanted), after_seq, after_seq, limit + 1],
    ).fetchall()
    has_more = len(rows) > limit
    rows = rows[:limit]
    return Response.json(
        200,
        {
            "object": "search_result",
            "data": [refund_json(r) for r in rows],
            "has_more": has_more,
            "next_page": str(rows[-1]["seq"]) if has_more else None,
            "url": "/v1/refunds/search",
        },
    )


def reset(conn: Conn) -> None:
    conn.execute(f"TRUNCATE {SCHEMA}.refunds, {SCHEMA}.idempotency_keys, {SCHEMA}.payment_intents")


# How long Stripe keeps an idempotency key: it may prune one once it is 24 hours old.
STRIPE_KEY_SECONDS = 24 * 60 * 60


def expire_keys(conn: Conn, params: dict[str, Any]) -> int:
    """Forget the finished idempotency keys first used at least ``older_than_seconds`` ago (default:
    Stripe's 24 hours), as Stripe prunes them: a request sent again under one is new. A key still in
    flight is kept (its request is being answered). Returns how many were forgotten."""
    raw = params.get("older_than_seconds") or str(STRIPE_KEY_SECONDS)
    if not re.fullmatch(r"[0-9]{1,9}", raw):
        raise ApiError(400, "older_than_seconds must be a whole number of seconds.", param="older_than_seconds")
    older_than = int(raw)
    gone = conn.execute(
        f"""DELETE FROM {SCHEMA}.idempotency_keys
            WHERE state = 'done' AND created <= now() - make_interval(secs => %s) RETURNING key""",
        [older_than],
    ).fetchall()
    return len(gone)


Handler = Callable[[Conn, dict[str, Any], re.Match[str]], Response]

API_ROUTES: list[tuple[str, re.Pattern[str], Handler]] = [
    ("POST", re.compile(r"^/v1/payment_intents$"), create_payment_intent),
    ("GET", re.compile(r"^/v1/payment_intents/(?P<id>[^/]+)$"), retrieve_payment_intent),
    ("POST", re.compile(r"^/v1/refunds$"), create_refund),
    ("GET", re.compile(r"^/v1/refunds$"), list_refunds),
    ("GET", re.compile(r"^/v1/refunds/search$"), search_refunds),
    ("GET", re.compile(r"^/v1/refunds/(?P<id>[^/]+)$"), retrieve_refund),
]


# --- Faults ---------------------------------------------------------------------------------


@dataclass
class Fault:
    kind: str
    latency_ms: int = 0
    status: str = ""
    method: str = "POST"
    path: str = "/v1/refunds"
    remaining: int = 1

    @classmethod
    def parse(cls, mode: str, *, method: str = "POST", path: str = "/v1/refunds", count: int = 1) -> Fault:
        kind, _, argument = mode.strip().partition(":")
        if kind not in FAULT_KINDS:
            others = ", ".join(sorted(FAULT_KINDS - {"latency"}))
            raise ApiError(400, f"Unknown fault mode {mode!r}; use one of: latency:<ms>, {others}.")
        latency_ms = 0
        status = ""
        if kind == "latency":
            if not argument.isdigit():
                raise ApiError(400, f"Fault mode {mode!r} needs milliseconds: latency:<ms>.")
            latency_ms = int(argument)
        elif kind == "refund_status":
            if argument not in CREATED_REFUND_STATUSES:
                wanted = ", ".join(sorted(CREATED_REFUND_STATUSES))
                raise ApiError(400, f"Fault mode {mode!r} needs a refund status: refund_status:<{wanted}>.")
            status = argument
        elif argument:
            raise ApiError(400, f"Fault mode {kind} takes no argument.")
        if count < 1:
            raise ApiError(400, "count must be at least 1.")
        return cls(kind=kind, latency_ms=latency_ms, status=status, method=method.upper(), path=path, remaining=count)

    @property
    def mode(self) -> str:
        if self.kind == "latency":
            return f"latency:{self.latency_ms}"
        if self.kind == "refund_status":
            return f"refund_status:{self.status}"
        return self.kind

    def matches(self, method: str, path: str) -> bool:
        if self.method not in {"*", method}:
            return False
        if self.path.endswith("*"):
            return path.startswith(self.path[:-1])
        return path == self.path

    def as_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "method": self.method, "path": self.path, "remaining": self.remaining}


class FaultQueue:
    """Faults queued by tests, taken by the next matching requests in order (in memory: a restart clears them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def take(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, path):
                    fault.remaining -= 1
                    if fault.remaining == 0:
                        self._faults.remove(fault)
                    return Fault(fault.kind, fault.latency_ms, fault.status, fault.method, fault.path, 1)
        return None

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def as_json(self) -> list[dict[str, Any]]:
        with self._lock:
            return [fault.as_json() for fault in self._faults]


class ActiveRequests:
    """Counts requests being handled, so a stop or a reset can wait for them to finish."""

    def __init__(self) -> None:
        self._count = 0
        self._changed = threading.Condition()

    @contextmanager
    def track(self) -> Iterator[None]:
        with self._changed:
            self._count += 1
        try:
            yield
        finally:
            with self._changed:
                self._count -= 1
                self._changed.notify_all()

    def wait_until_at_most(self, count: int, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self._count <= count, timeout)


# --- HTTP -----------------------------------------------------------------------------------


class SandboxServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], database_url: str) -> None:
        super().__init__(address, SandboxRequestHandler)
        self.database_url = database_url
        self.faults = FaultQueue()
        self.active = ActiveRequests()
        self.stopping = False


class Dropped(Exception):
    """The fault says: close the socket without answering."""


class SandboxRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's HTTP client expects
    server_version = "payments-sandbox"
    timeout = 60  # an idle keep-alive connection is closed after this many seconds
    server: SandboxServer

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # Methods the API does not use: Stripe's JSON answer for a route it does not know, not http.server's
    # HTML 501 page.
    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # one line per request is written by _handle, with the idempotency details

    def log_error(self, format: str, *args: Any) -> None:
        log.warning("%s %s", self.address_string(), format % args)

    # -- plumbing

    def _handle(self, method: str) -> None:
        started = time.monotonic()
        self.request_id = new_id("req_")
        self.log_key = "-"
        self.log_fault = "-"
        self.log_replayed = False
        status: int | str = 500
        with self.server.active.track():
            try:
                try:
                    response = self._dispatch(method)
                except Dropped:
                    status = "dropped"
                    self.close_connection = True
                    with suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                except Exception:
                    log.exception("unhandled error on %s %s", method, self.path)
                    response = api_error_500("The sandbox failed unexpectedly; see its log.")
                status = response.status
                try:
                    self._send(response)
                except OSError:  # the client gave up waiting (its timeout) and closed the socket
                    status = f"{status}-unsent(client gone)"
                    self.close_connection = True
            finally:
                log.info(
                    '%s "%s %s" %s %.0fms key=%s replayed=%s fault=%s',
                    self.client_address[0],
                    method,
                    self.path,
                    status,
                    (time.monotonic() - started) * 1000,
                    self.log_key,
                    str(self.log_replayed).lower(),
                    self.log_fault,
                )

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(response.body)))
        self.send_header("Request-Id", self.request_id)
        for name, value in response.headers.items():
            self.send_header(name, value)
        if self.server.stopping:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(response.body)

    def _read_pairs(self, query: str) -> list[tuple[str, str]]:
        """The query's and the body's parameters; ApiError for a body that cannot be read or a name or
        value PostgreSQL cannot store (a NUL character: a form carries one as %00)."""
        pairs = parse_qsl(query, keep_blank_values=True)
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0 or length > MAX_BODY_BYTES:
            # Not read: a negative length would read until the client closes, a huge one fill memory.
            self.close_connection = True
            if length < 0:
                raise ApiError(400, "The request body could not be parsed: Content-Length is negative.")
            raise ApiError(413, f"The request body can be at most {MAX_BODY_BYTES} bytes.")
        if length:
            body = self.rfile.read(length).decode("utf-8")
            if self.headers.get("Content-Type", "").startswith("application/json"):
                try:
                    payload = json.loads(body or "{}")
                except RecursionError:
                    raise ApiError(400, "The request body is nested too deeply.") from None
                if not isinstance(payload, dict):
                    raise ApiError(400, "A JSON request body must be an object of parameters.")
                pairs += [(str(k), v if isinstance(v, str) else json.dumps(v)) for k, v in payload.items()]
            else:
                pairs += parse_qsl(body, keep_blank_values=True)
        for name, value in pairs:
            reason = unstorable(name) or unstorable(value)
            if reason:
                param = repr(name) if unstorable(name) else name
                raise ApiError(400, f"Invalid string: {param} {reason}.", param=param)
        return pairs

    def _dispatch(self, method: str) -> Response:
        url = urlsplit(self.path)
        try:
            pairs = self._read_pairs(url.query)
        except ApiError as exc:
            return exc.response()
        except (ValueError, UnicodeDecodeError):
            return ApiError(400, "The request body could not be parsed.").response()
        if self.server.stopping:
            return ApiError(503, "The sandbox is stopping.", type_="api_error").response()
        if url.path.startswith("/_sandbox/"):
            try:
                return self._control(method, url.path, pairs)
            except ApiError as exc:
                return exc.response()
        if not self._authenticated():
            return self._unauthenticated()
        for route_method, pattern, handler in API_ROUTES:
            match = pattern.match(url.path)
            if match and route_method == method:
                return self._api(method, url.path, pairs, handler, match)
        return ApiError(404, f"Unrecognized request URL ({method}: {url.path}).").response()

    # -- auth

    def _api_key(self) -> str:
        header = self.headers.get("Authorization", "").strip()
        if header.startswith("Bearer "):
            return header.removeprefix("Bearer ").strip()
        if header.startswith("Basic "):
            try:
                return base64.b64decode(header.removeprefix("Basic ")).decode().partition(":")[0]
            except (binascii.Error, UnicodeDecodeError):
                return ""
        return ""

    def _authenticated(self) -> bool:
        return self._api_key().startswith("sk_test_")

    def _unauthenticated(self) -> Response:
        key = self._api_key()
        if not key:
            message = (
                "You did not provide an API key. You need to provide your API key in the Authorization header, "
                "using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY')."
            )
        else:
            message = f"Invalid API Key provided: {key[:8]}****. The sandbox accepts test keys (sk_test_...) only."
        return ApiError(401, message).response()

    # -- the API, with idempotency and faults

    def _fault(self, method: str, path: str) -> Fault | None:
        header = self.headers.get("X-Sandbox-Fault")
        fault = Fault.parse(header, method=method, path=path) if header else self.server.faults.take(method, path)
        if fault is not None:
            self.log_fault = fault.mode
        return fault

    def _api(
        self, method: str, path: str, pairs: list[tuple[str, str]], handler: Handler, match: re.Match[str]
    ) -> Response:
        try:
            params = parse_params(pairs)
            fault = self._fault(method, path)
        except ApiError as exc:
            return exc.response()
        key = self.headers.get("Idempotency-Key") if method == "POST" else None
        self.log_key = key or "-"
        if fault is not None and fault.kind == "error_before_commit":
            # Before anything is claimed or stored: the retry starts from nothing.
            return api_error_500("Sandbox fault: error before commit (nothing was stored).")
        if fault is not None and fault.kind == "rate_limited":
            # As Stripe turns a request away: before anything is claimed or stored.
            return ApiError(
                429, "Sandbox fault: too many requests; nothing was done. Try again later.", code="rate_limit"
            ).response()
        if fault is not None and fault.kind == "refund_status":
            params[_STATUS_PARAM] = fault.status
        with connect(self.server.database_url) as conn:
            if key is None:
                if fault is not None and fault.kind == "latency":
                    time.sleep(fault.latency_ms / 1000)
                try:
                    with conn.transaction():
                        response = handler(conn, params, match)
                except ApiError as exc:
                    response = exc.response()
            else:
                fingerprint = request_hash(method, path, pairs)
                response = self._idempotent(
                    conn, key, fingerprint, method, path, fault, lambda: handler(conn, params, match)
                )
        if fault is not None and fault.kind == "error_after_commit":
            return api_error_500("Sandbox fault: error after commit (the result was stored).")
        if fault is not None and fault.kind == "drop_after_commit":
            raise Dropped
        return response

    def _idempotent(
        self,
        conn: Conn,
        key: str,
        fingerprint: str,
        method: str,
        path: str,
        fault: Fault | None,
        work: Callable[[], Response],
    ) -> Response:
        """Run ``work`` at most once per idempotency key, and answer repeats with the stored response.

        The key's row is inserted first (unique by key) with state ``in_flight`` and
        committed, so other requests see the claim; the work and the stored response
        commit together in one transaction afterwards. While working we hold a session
        advisory lock on the key: a second request that cannot take it answers 409,
        and one that finds the lock free but the row still ``in_flight`` knows the
        claimant died (its connection, lock and uncommitted work went with it), so
        nothing took effect and it may take the claim over. This holds across threads,
        processes and restarts, because it lives in PostgreSQL.
        """
        if len(key) > MAX_IDEMPOTENCY_KEY_LENGTH:
            return ApiError(400, f"Idempotency keys can be at most {MAX_IDEMPOTENCY_KEY_LENGTH} characters.").response()
        lock_id = _lock_id(b"key:" + key.encode())
        got_lock = conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", [lock_id]).fetchone()
        if not (got_lock and got_lock["ok"]):
            return ApiError(
                409,
                "There is currently another in-progress request using this idempotent key (that probably means "
                f"you submitted twice, and the other request is still going through): {key}. "
                "Please try again later.",
                type_="idempotency_error",
                code="idempotency_key_in_use",
                headers={"Idempotency-Key": key, "Stripe-Should-Retry": "true"},
            ).response()
        try:
            claimed = conn.execute(
                f"""INSERT INTO {SCHEMA}.idempotency_keys (key, request_hash, method, path, state, request_id)
                    VALUES (%s, %s, %s, %s, 'in_flight', %s) ON CONFLICT (key) DO NOTHING RETURNING key""",
                [key, fingerprint, method, path, self.request_id],
            ).fetchone()
            if claimed is None:
                existing = conn.execute(f"SELECT * FROM {SCHEMA}.idempotency_keys WHERE key = %s", [key]).fetchone()
                assert existing is not None
                if existing["state"] == "done":
                    if existing["request_hash"] != fingerprint:
                        return ApiError(
                            400,
                            "Keys for idempotent requests can only be used with the same parameters they were "
                            f"first used with. Try using a key other than '{key}' if you meant to execute a "
                            "different request.",
                            type_="idempotency_error",
                            headers={"Idempotency-Key": key},
                        ).response()
                    self.log_replayed = True
                    if fault is not None and fault.kind == "latency":
                        time.sleep(fault.latency_ms / 1000)
                    return Response(
                        existing["response_status"],
                        existing["response_body"].encode(),
                        {
                            "Idempotency-Key": key,
                            "Idempotent-Replayed": "true",
                            "Original-Request": existing["request_id"],
                        },
                    )
                # in_flight with the lock free: a dead claimant's leftover; nothing of it committed.
                conn.execute(
                    f"""UPDATE {SCHEMA}.idempotency_keys SET request_hash = %s, method = %s, path = %s,
                        request_id = %s, created = now() WHERE key = %s""",
                    [fingerprint, method, path, self.request_id, key],
                )
            if fault is not None and fault.kind == "latency":
                time.sleep(fault.latency_ms / 1000)
            try:
                with conn.transaction():
                    response = work()
                    self._store(conn, key, response)
            except ApiError as exc:
                response = exc.response()
                if exc.store:
                    self._store(conn, key, response)
                else:
                    conn.execute(f"DELETE FROM {SCHEMA}.idempotency_keys WHERE key = %s", [key])
            response.headers["Idempotency-Key"] = key
            return response
        finally:
            # Closing the connection would release the lock too; unlocking keeps it explicit.
            with suppress(psycopg.Error):
                conn.execute("SELECT pg_advisory_unlock(%s)", [lock_id])

    def _store(self, conn: Conn, key: str, response: Response) -> None:
        conn.execute(
            f"""UPDATE {SCHEMA}.idempotency_keys SET state = 'done', response_status = %s, response_body = %s,
                finished = now() WHERE key = %s""",
            [response.status, response.body.decode(), key],
        )

    # -- control endpoints

    def _control(self, method: str, path: str, pairs: list[tuple[str, str]]) -> Response:
        params = dict(pairs)
        if (method, path) == ("GET", "/_sandbox/health"):
            return Response.json(200, {"ok": True})
        if (method, path) == ("POST", "/_sandbox/faults"):
            mode = params.get("mode")
            if not mode:
                raise missing("mode")
            count = params.get("count", "1")
            if not count.isdigit():
                raise ApiError(400, "count must be a whole number.", param="count")
            self.server.faults.add(
                Fault.parse(
                    mode,
                    method=params.get("method", "POST"),
                    path=params.get("path", "/v1/refunds"),
                    count=int(count),
                )
            )
            return Response.json(200, {"faults": self.server.faults.as_json()})
        if (method, path) == ("GET", "/_sandbox/faults"):
            return Response.json(200, {"faults": self.server.faults.as_json()})
        if (method, path) == ("DELETE", "/_sandbox/faults"):
            self.server.faults.clear()
            return Response.json(200, {"faults": []})
        with connect(self.server.database_url) as conn:
            if (method, path) == ("POST", "/_sandbox/payment_intents"):
                payment_id = str_param(params, "id", required=True)
                amount = int_param(params, "amount", required=True)
                currency = currency_param(params, required=True)
                metadata = _seeded_metadata(params.get("metadata") or "{}")
                assert payment_id and amount and currency
                return Response.json(
                    200,
                    payment_seed(conn, payment_id=payment_id, amount=amount, currency=currency, metadata=metadata),
                )
            if (method, path) == ("POST", "/_sandbox/reset"):
                # Let requests still running (a latency fault from the previous test)
                # finish first, so none of them lands after the reset.
                self.server.active.wait_until_at_most(1, timeout=10)
                self.server.faults.clear()
                reset(conn)
                return Response.json(200, {"ok": True})
            settle = re.match(r"^/_sandbox/refunds/(?P<id>[^/]+)/settle$", path)
            if method == "POST" and settle is not None:
                return Response.json(200, settle_refund(conn, settle["id"], params.get("status", "")))
            if (method, path) == ("GET", "/_sandbox/refunds"):
                rows = conn.execute(f"SELECT * FROM {SCHEMA}.refunds ORDER BY seq").fetchall()
                return Response.json(200, {"data": [refund_json(r) for r in rows]})
            if (method, path) == ("POST", "/_sandbox/idempotency_keys/expire"):
                return Response.json(200, {"expired": expire_keys(conn, params)})
            if (method, path) == ("GET", "/_sandbox/idempotency_keys"):
                rows = conn.execute(
                    f"""SELECT key, state, method, path, request_id, response_status, created, finished
                        FROM {SCHEMA}.idempotency_keys ORDER BY created"""
                ).fetchall()
                return Response.json(200, {"data": rows})
        raise ApiError(404, f"Unrecognized sandbox control URL ({method}: {path}).")


def unstorable(value: Any) -> str | None:
    """Why PostgreSQL could not store this text (or every key and value of a JSON object), or None.
    The check of ``support.storable``, kept here: the sandbox is a process of its own and imports
    nothing of the product's apps (``support`` brings Celery and Django's settings along)."""
    if isinstance(value, dict):
        return next((why for item in [*value.keys(), *value.values()] if (why := unstorable(item))), None)
    if not isinstance(value, str):
        return None
    if "\x00" in value:
        return "contains a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "contains characters that are not valid Unicode"
    return None


def _seeded_metadata(text: str) -> dict[str, str]:
    """A seeded payment's metadata: a JSON object of strings, as ``metadata[...]`` gives the API's."""
    try:
        metadata = json.loads(text)
    except (ValueError, RecursionError):
        raise ApiError(400, "Invalid metadata: must be a JSON object of strings.", param="metadata") from None
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ApiError(400, "Invalid metadata: must be a JSON object of strings.", param="metadata")
    if unstorable(metadata):
        raise ApiError(400, f"Invalid metadata: it {unstorable(metadata)}.", param="metadata")
    return metadata


# --- Command line ------------------------------------------------------------------------------


def parse_seed(text: str) -> tuple[str, int, str]:
    """``pi_demo_A-1001:2900:usd`` -> ``("pi_demo_A-1001", 2900, "usd")``."""
    payment_id, _, rest = text.partition(":")
    amount, _, currency = rest.partition(":")
    if not payment_id or not amount.isdigit() or not re.fullmatch(r"[A-Za-z]{3}", currency or "usd"):
        raise argparse.ArgumentTypeError(
            f"expected ID:AMOUNT_CENTS[:CURRENCY], e.g. pi_demo_A-1001:2900:usd; got {text!r}"
        )
    return payment_id, int(amount), (currency or "usd").lower()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m payments.sandbox", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=12111)
    parser.add_argument(
        "--database-url",
        default=os.environ.get("SANDBOX_DATABASE_URL") or os.environ.get("DATABASE_URL"),
        help="PostgreSQL URL or conninfo (default: $SANDBOX_DATABASE_URL, then $DATABASE_URL)",
    )
    parser.add_argument(
        "--seed",
        action="append",
        default=[],
        type=parse_seed,
        metavar="ID:AMOUNT[:CURRENCY]",
        help="create a succeeded payment with this id unless it exists (repeatable)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not args.database_url:
        parser.error("no database: pass --database-url or set SANDBOX_DATABASE_URL or DATABASE_URL")
    if args.database_url.startswith("sqlite"):
        parser.error("the sandbox stores its records in PostgreSQL, never SQLite")

    try:
        ensure_schema(args.database_url)
        with connect(args.database_url) as conn:
            for payment_id, amount, currency in args.seed:
                payment_seed(conn, payment_id=payment_id, amount=amount, currency=currency)
                log.info("seeded %s with %s", payment_id, format_money(amount, currency))
    except psycopg.Error as exc:
        log.error("cannot use the sandbox database: %s", exc)
        return 2
    except ApiError as exc:
        log.error("cannot seed: %s", exc.message)
        return 2

    server = SandboxServer((args.host, args.port), args.database_url)
    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    log.info("payment sandbox listening on http://%s:%s (schema %s)", host, port, SCHEMA)
    while not stop.wait(0.5):
        pass
    log.info("stopping: finishing requests in progress")
    server.stopping = True
    server.shutdown()
    if not server.active.wait_until_at_most(0, timeout=10):
        log.warning("stopped with requests still in progress")
    server.server_close()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
