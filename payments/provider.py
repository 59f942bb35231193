"""The payment provider adapter: every refund the app issues goes through here.

A thin layer over the official ``stripe`` SDK (a ``StripeClient`` per provider)
that speaks in our terms (payment references, cents, idempotency keys) and turns
the SDK's errors into three answers a caller can act on:

- ``ProviderDeclined``: the provider said no (amount too large, unknown payment).
  Nothing happened; retrying will not help; the message is for humans.
- ``ProviderUncertain``: we do not know what happened (connection dropped,
  timeout, 5xx, another request with the same key still in flight). The refund
  may or may not exist: reconcile with ``find_refund`` before anything else, then
  retry with the same idempotency key if it does not. ``ProviderUnreachable`` (no
  answer at all), ``ProviderInFlight`` (the provider is still working on a request
  under the key) and ``ProviderRateLimited`` (429) say to wait before asking again
  (``WAIT_AND_ASK_AGAIN``).
- ``IdempotencyMismatch`` (a ``ProviderUncertain``): the key was already used, with
  other parameters (Stripe's 400 idempotency_error). The provider holds the outcome
  of that first request, a refund perhaps: it is not a refusal. Look the key up
  (``find_refund``) before anything else; sent again, it changes nothing.

Configuration (Django settings first, then the environment): ``STRIPE_API_KEY``
(default ``sk_test_sandbox``), ``STRIPE_API_BASE`` (default the local sandbox,
``http://127.0.0.1:12111``), ``PAYMENTS_TIMEOUT_SECONDS`` (default 10).

No Django models here: the ledger calls the adapter, never the other way round.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

import requests
import stripe
import urllib3
from requests.adapters import HTTPAdapter

from tickets.money import format_money

log = logging.getLogger(__name__)

DEFAULT_API_KEY = "sk_test_sandbox"
DEFAULT_API_BASE = "http://127.0.0.1:12111"
DEFAULT_TIMEOUT_SECONDS = 10.0
# Every refund carries its idempotency key in its metadata, so that after a crash,
# when the key is all we know, the refund can be found again.
IDEMPOTENCY_METADATA_KEY = "idempotency_key"
_PAGE_SIZE = 100

# The SDK's telemetry sends platform details and request timings in headers and
# writes an id file under ~/.config/stripe. None of it is needed to refund; the
# adapter is the only user of the SDK in this process, so turn it off globally.
stripe.enable_telemetry = False


class ProviderError(Exception):
    """Base of the adapter's errors. Raised as is for configuration problems (a rejected API key)."""


class ProviderDeclined(ProviderError):
    """The provider refused the request. Nothing happened; do not retry the same request."""

    def __init__(self, message: str, *, code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.param = param


class ProviderUncertain(ProviderError):
    """The outcome is unknown: reconcile with ``find_refund`` before retrying under the same key."""


class ProviderUnreachable(ProviderUncertain):
    """No answer at all: the connection was refused, reset or timed out. Every other request to
    the provider now is likely to meet the same silence."""


class ProviderInFlight(ProviderUncertain):
    """Another request under the same idempotency key is still being worked on at the provider (its 409):
    the refund may be about to exist. Not an outcome to hand over: wait, then ask under the key again."""


class ProviderRateLimited(ProviderUncertain):
    """The provider turned the request away for now (429, too many requests): nothing was done. Wait,
    then ask under the key again."""


# The provider's answers that say to wait and ask again later: an outage, not the refund's problem.
WAIT_AND_ASK_AGAIN = (ProviderUnreachable, ProviderInFlight, ProviderRateLimited)


class IdempotencyMismatch(ProviderUncertain):
    """The idempotency key was first used with different parameters: what that first request did (a
    refund, perhaps) is the key's outcome, unknown from this answer. Reconcile under the key."""


@dataclass(frozen=True)
class ProviderRefund:
    id: str
    amount_cents: int
    currency: str
    status: str
    payment_reference: str
    metadata: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))

    @property
    def idempotency_key(self) -> str | None:
        return self.metadata.get(IDEMPOTENCY_METADATA_KEY)


@dataclass(frozen=True)
class ProviderPayment:
    id: str
    amount_cents: int
    currency: str
    status: str


def _setting(name: str, default: str) -> str:
    """Django settings first (when configured), then the environment, then the default."""
    try:
        from django.conf import settings
        from django.core.exceptions import ImproperlyConfigured

        try:
            value = getattr(settings, name, None)
        except ImproperlyConfigured:
            value = None
    except ImportError:
        value = None
    if value is None or value == "":
        value = os.environ.get(name) or default
    return str(value)


def _is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class PaymentProvider:
    """Refunds through the official SDK. Thread-safe; make one and share it."""

    def __init__(
        self, *, api_key: str | None = None, api_base: str | None = None, timeout_seconds: float | None = None
    ) -> None:
        self.api_key = api_key or _setting("STRIPE_API_KEY", DEFAULT_API_KEY)
        self.api_base = (api_base or _setting("STRIPE_API_BASE", DEFAULT_API_BASE)).rstrip("/")
        if timeout_seconds is None:
            raw = _setting("PAYMENTS_TIMEOUT_SECONDS", str(DEFAULT_TIMEOUT_SECONDS))
            try:
                timeout_seconds = float(raw)
            except ValueError:
                raise ValueError(f"PAYMENTS_TIMEOUT_SECONDS={raw!r} is not a number of seconds") from None
        self.timeout_seconds = timeout_seconds

        session = requests.Session()
        # requests would otherwise honour HTTP(S)_PROXY from the environment and
        # send a loopback sandbox's traffic (and its API key) to a proxy.
        session.trust_env = not _is_loopback(self.api_base)
        session.mount("http://", _CutAdapter())
        session.mount("https://", _CutAdapter())
        self._client = stripe.StripeClient(
            self.api_key,
            base_addresses={"api": self.api_base},
            http_client=_WholeRequestTimeout(timeout=timeout_seconds, session=session),
            # No retries inside the SDK. A retry it makes after a timeout or a dropped
            # connection would block the caller for up to several backoffs and then
            # still end in the same "don't know" answer; worse, it would hide from us
            # that the first attempt may have taken effect. We record the intent,
            # reconcile by idempotency key and retry under that same key ourselves,
            # from the ledger, where a crash of this process cannot lose the retry.
            max_network_retries=0,
        )

    # -- reads

    def get_payment(self, payment_reference: str) -> ProviderPayment:
        try:
            intent = self._client.v1.payment_intents.retrieve(payment_reference)
        except stripe.StripeError as exc:
            raise _translate(exc, doing=f"looking up payment {payment_reference}") from exc
        return ProviderPayment(
            id=intent.id, amount_cents=int(intent.amount), currency=str(intent.currency), status=str(intent.status)
        )

    def list_refunds(self, *, payment_reference: str) -> list[ProviderRefund]:
        """Every refund of a payment, newest first (the provider's order)."""
        return self._list({"payment_intent": payment_reference, "limit": _PAGE_SIZE}, doing="listing refunds")

    def find_refund(self, *, idempotency_key: str, payment_reference: str | None = None) -> ProviderRefund | None:
        """The refund created under ``idempotency_key``, or None if the provider has none.

        Looks the key up in the refunds' metadata. With ``payment_reference`` the
        search lists that payment's refunds, which any Stripe-compatible API
        supports; without it, it asks the provider to filter refunds by metadata,
        an extension the local sandbox supports and Stripe itself does not.
        Raises ``ProviderUncertain`` if the provider cannot be asked.
        """
        params: dict[str, Any] = {"limit": _PAGE_SIZE}
        if payment_reference:
            params["payment_intent"] = payment_reference
        else:
            params["metadata"] = {IDEMPOTENCY_METADATA_KEY: idempotency_key}
        return refund_under_key(
            self._list(params, doing=f"looking up the refund under key {idempotency_key}"), idempotency_key
        )

    def _list(self, params: dict[str, Any], *, doing: str) -> list[ProviderRefund]:
        try:
            page = self._client.v1.refunds.list(params)  # type: ignore[arg-type] - metadata filter, see find_refund
            return [_to_refund(refund) for refund in page.auto_paging_iter()]
        except stripe.StripeError as exc:
            raise _translate(exc, doing=doing) from exc

    # -- the effect

    def create_refund(
        self,
        *,
        payment_reference: str,
        amount_cents: int,
        currency: str,
        idempotency_key: str,
        metadata: dict[str, str],
    ) -> ProviderRefund:
        """Refund ``amount_cents`` of a payment, at most once per ``idempotency_key``.

        Preconditions: the caller has committed its intent (the key) before calling,
        and checked the business rules; the provider still refuses amounts above
        what remains refundable. Calling again with the same key and arguments
        returns the same refund.
        """
        if amount_cents <= 0:
            raise ValueError(f"amount_cents must be positive, got {amount_cents}")
        if not idempotency_key:
            raise ValueError("idempotency_key is required")
        if metadata.get(IDEMPOTENCY_METADATA_KEY, idempotency_key) != idempotency_key:
            raise ValueError(f"metadata[{IDEMPOTENCY_METADATA_KEY!r}] must be the idempotency key if given")
        currency = currency.lower()

        # Refund in the currency paid, or not at all: Stripe refunds in the payment's
        # currency whatever we meant, so a mismatch is a bug to refuse, not to convert.
        payment = self.get_payment(payment_reference)
        if payment.currency != currency:
            raise ProviderDeclined(
                f"Payment {payment_reference} was made in {payment.currency.upper()}; "
                f"it cannot be refunded in {currency.upper()}.",
                code="currency_mismatch",
                param="currency",
            )
        try:
            refund = self._client.v1.refunds.create(
                {
                    "payment_intent": payment_reference,
                    "amount": amount_cents,
                    "metadata": {**metadata, IDEMPOTENCY_METADATA_KEY: idempotency_key},
                },
                {"idempotency_key": idempotency_key},
            )
        except stripe.StripeError as exc:
            raise _translate(
                exc, doing=f"refunding {format_money(amount_cents, currency)} of {payment_reference}"
            ) from exc
        return _to_refund(refund)


# The connections the provider request under way in this thread uses (_WholeRequestTimeout).
_in_flight = threading.local()


class _WholeRequestTimeout(stripe.RequestsClient):
    """A request to the provider ends within the timeout, whole. requests' timeout bounds each read
    of the socket, not the answer: a provider (or a proxy in front of it) that sends its answer a
    few bytes at a time, each within the timeout, held the worker, and the ticket, until the task's
    time limit, or for ever under a pool that kills nothing. At the timeout the connection is shut
    down under the read: the request fails as a dropped connection (the outcome unknown, reconciled
    by key like any other)."""

    def request(self, method: str, url: str, headers: Any, post_data: Any = None) -> Any:
        connections: list[Any] = []
        _in_flight.connections = connections
        fired = threading.Event()
        cut = threading.Timer(float(self._timeout), _shut_down, args=(connections, fired))
        cut.daemon = True
        cut.start()
        try:
            answer = super().request(method, url, headers, post_data)
        except stripe.APIConnectionError:
            if not fired.is_set():
                raise
            answer = None
        finally:
            cut.cancel()
            _in_flight.connections = None
        if fired.is_set():
            # Whatever was read before the cut (headers cut short read as their end, say) is no answer.
            raise stripe.APIConnectionError(f"no whole answer within {self._timeout:g} s; the connection was cut")
        return answer


def _shut_down(connections: list[Any], fired: threading.Event) -> None:
    fired.set()
    for connection in list(connections):
        sock = getattr(connection, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # closed meanwhile
    log.warning("payment provider: no whole answer within the timeout; the connection was cut")


class _NotedConnections:
    """A connection pool that notes each connection it lends to the request under way in this thread."""

    def _get_conn(self, timeout: float | None = None) -> Any:
        connection = super()._get_conn(timeout)  # type: ignore[misc]
        noted = getattr(_in_flight, "connections", None)
        if noted is not None:
            noted.append(connection)
        return connection


class _NotedHTTPPool(_NotedConnections, urllib3.HTTPConnectionPool):
    pass


class _NotedHTTPSPool(_NotedConnections, urllib3.HTTPSConnectionPool):
    pass


class _CutAdapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _NotedHTTPPool, "https": _NotedHTTPSPool}


def refund_under_key(refunds: list[ProviderRefund], idempotency_key: str) -> ProviderRefund | None:
    """The one refund of ``refunds`` created under ``idempotency_key`` (its metadata), or None."""
    found = [refund for refund in refunds if refund.idempotency_key == idempotency_key]
    if len(found) > 1:
        # The provider deduplicates by key, so this means a second refund was
        # made for the same intent (e.g. a retry after the provider forgot the key).
        ids = ", ".join(refund.id for refund in found)
        raise ProviderError(f"{len(found)} refunds carry idempotency key {idempotency_key}: {ids}")
    return found[0] if found else None


def _to_refund(refund: Any) -> ProviderRefund:
    metadata = refund.metadata.to_dict() if refund.metadata is not None else {}
    payment_intent = refund.payment_intent
    return ProviderRefund(
        id=refund.id,
        amount_cents=int(refund.amount),
        currency=str(refund.currency),
        status=str(refund.status),
        payment_reference=payment_intent if isinstance(payment_intent, str) else getattr(payment_intent, "id", ""),
        metadata={str(k): str(v) for k, v in metadata.items()},
    )


def _translate(exc: stripe.StripeError, *, doing: str) -> ProviderError:
    message = exc.user_message or str(exc)
    # A 409 is another request under the same key still running: the refund may be
    # about to exist. The SDK raises it as a plain APIError, so look at the status.
    if exc.http_status == 409:
        return ProviderInFlight(f"While {doing}: a request with the same idempotency key is in flight ({message})")
    if isinstance(exc, stripe.RateLimitError):
        return ProviderRateLimited(f"While {doing}: the payment provider asks to slow down ({message})")
    if isinstance(exc, stripe.IdempotencyError):
        return IdempotencyMismatch(f"While {doing}: {message}")
    if isinstance(exc, (stripe.InvalidRequestError, stripe.CardError)):
        return ProviderDeclined(message, code=exc.code, param=exc.param)
    if isinstance(exc, (stripe.AuthenticationError, stripe.PermissionError)):
        return ProviderError(f"While {doing}: the payment provider rejected our API key ({message})")
    # APIConnectionError (refused, reset, dropped, timed out), APIError (5xx or an
    # unreadable answer), RateLimitError and anything newer: we do not know.
    log.warning("payment provider outcome unknown while %s: %r", doing, exc)
    if isinstance(exc, stripe.APIConnectionError):
        return ProviderUnreachable(f"While {doing}: {message}")
    return ProviderUncertain(f"While {doing}: {message}")
