from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
import warnings
from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model
from psycopg.conninfo import make_conninfo

from agents import refunds as refund_module
from payments.provider import PaymentProvider
from payments.sandbox_process import SandboxProcess
from tickets.models import Customer, Order, OrderLine, OrderStatus

_counter = itertools.count(1)


def _flush_again_after_a_deadlock() -> None:
    """A test's teardown empties the tables while the live stack of the browser and worker tests
    (web, workers, beat) may still be using them; PostgreSQL then breaks a deadlock by failing the
    flush, or a row written meanwhile refers to one the flush deleted (its foreign key, checked at
    commit), and the test errored at teardown. It is tried again, a few times."""
    from django.db import IntegrityError, OperationalError
    from django.db.backends.postgresql.operations import DatabaseOperations

    flush = DatabaseOperations.execute_sql_flush

    def execute_sql_flush(self, sql_list):  # noqa: ANN001, ANN202
        for attempt in itertools.count(1):
            try:
                return flush(self, sql_list)
            except (OperationalError, IntegrityError) as exc:
                if attempt >= 5 or not (isinstance(exc, IntegrityError) or "deadlock detected" in str(exc)):
                    raise
                time.sleep(0.2 * attempt)
        return None

    DatabaseOperations.execute_sql_flush = execute_sql_flush


_flush_again_after_a_deadlock()


# What the flush's post_migrate would write again as it was (every model's content type and
# permissions): kept, not deleted and written again. The groups and their permissions are emptied.
_KEPT_BY_FLUSH = frozenset({"django_content_type", "auth_permission"})


def _empty_tables_row_by_row() -> None:
    """A transactional test's teardown empties every table. PostgreSQL's TRUNCATE (Django's way)
    makes new files for every table and index and takes 1 to 5 s on a busy machine; a test leaves a
    few rows, which DELETE removes in milliseconds. The foreign keys are checked at commit
    (Django makes them deferrable), when every table is empty. Sequences are not reset by either."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):  # noqa: ANN001, ANN202
        if reset_sequences or not tables:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        emptied = [table for table in tables if table not in _KEPT_BY_FLUSH]
        return ["SET CONSTRAINTS ALL DEFERRED", *(f"DELETE FROM {self.quote_name(table)}" for table in emptied)]

    DatabaseOperations.sql_flush = sql_flush


_empty_tables_row_by_row()


@pytest.fixture(autouse=True)
def _customer_confirmation(request, settings):  # noqa: ANN001
    """The customer's confirmation before a refund is paid is on in the product; tests of other
    things turn it off, tests of it are marked ``customer_confirms``."""
    settings.REFUND_CUSTOMER_CONFIRMATION = request.node.get_closest_marker("customer_confirms") is not None


@pytest.fixture(autouse=True)
def _no_pause_after_a_failure() -> None:
    """A test that made Redis or the broker fail leaves no pause (live updates, doorbells, the rate
    limits' cache: ``support.pauses``) to the next one."""
    from support import pauses

    pauses.lift_all()


@pytest.fixture(autouse=True)
def _no_lease_renewed_past_its_test() -> Iterator[None]:
    """A lease this process's heartbeat still renews when a test ends (a pass the test left running)
    is dropped from it, with a warning naming it: the test's database is gone, so the heartbeat's
    rounds would fail, each logging a traceback from its thread, and CPython 3.11 formatting one while
    pytest parses a failed test's source for its report crashed the whole xdist worker ("AST
    constructor recursion depth mismatch", python/cpython#106905), losing every test it still had."""
    yield
    from agents import lease

    beat = lease._heartbeat
    if beat is None:
        return
    with beat.changed:
        left = [held for held, _ in beat.due.values()]
        beat.due.clear()
        beat.changed.notify()
    if left:
        warnings.warn(f"leases still renewed when the test ended: {left}", stacklevel=1)


@pytest.fixture(autouse=True)
def _no_failed_sign_ins_of_earlier_tests() -> None:
    """The failed sign-ins counted per address and per account (``support.login_limits``) live in the
    Redis cache, which the suite's tests share: each test starts with none, as a test's database does,
    or the wrong passwords of earlier tests from 127.0.0.1 would lock the next sign-ins out."""
    from support import login_limits

    login_limits.release()


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):  # noqa: ANN001
    # Test users need real logins, not production-strength hashing (hundreds of ms each).
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def media(settings, tmp_path):  # noqa: ANN001, ANN201
    """Attachments stored under a folder of this test's own (Django's default storage)."""
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def stored_files(root) -> list:  # noqa: ANN001
    """Every file under ``root`` (the media fixture's folder)."""
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def make_customer(name: str = "", *, flagged: bool = False) -> Customer:
    n = next(_counter)
    username = name or f"customer{n}"
    user = get_user_model().objects.create_user(username=username, password="pw-for-tests-123")
    return Customer.objects.create(
        user=user, name=username.title(), email=f"{username}@example.test", requires_refund_approval=flagged
    )


def make_order(
    customer: Customer, *, total_cents: int = 5000, status: str = OrderStatus.DELIVERED, number: str = ""
) -> Order:
    n = next(_counter)
    order = Order.objects.create(
        customer=customer,
        number=number or f"T-{n:05d}",
        status=status,
        total_cents=total_cents,
        currency="usd",
        payment_reference=f"pi_test_{n}",
    )
    OrderLine.objects.create(order=order, sku="SKU", description="Thing", quantity=1, unit_price_cents=total_cents)
    return order


# STATE_BUNDLE_KEY of the deployment a state bundle is exported from and restored into, and of another
# one (each at least the 32 characters the settings require).
STATE_BUNDLE_KEY = "key-A-of-the-tests-state-bundles-0123456789"
OTHER_STATE_BUNDLE_KEY = "key-B-of-another-deployment-9876543210abcdef"


@pytest.fixture
def state_bundle_key(settings) -> str:  # noqa: ANN001
    """State bundles signed and checked with ``STATE_BUNDLE_KEY`` (tests/state turns it on for every test)."""
    settings.STATE_BUNDLE_KEY = STATE_BUNDLE_KEY
    return STATE_BUNDLE_KEY


@pytest.fixture
def customer(db) -> Customer:  # noqa: ANN001
    return make_customer()


@pytest.fixture
def other_customer(db) -> Customer:  # noqa: ANN001
    return make_customer()


# --- The payment sandbox: a real separate process on the test database ---------------


def conninfo_of_the_test_database() -> str:
    """libpq conninfo for the test database pytest-django created (call after django_db_setup)."""
    from django.db import connection

    settings = connection.settings_dict
    # pytest-django creates the test database only if a collected test asks for
    # it; without it NAME is still the real database, which reset() would wipe.
    test_name = (settings.get("TEST") or {}).get("NAME")
    if not (settings["NAME"] == test_name or settings["NAME"].startswith("test_")):
        raise RuntimeError(
            f"refusing to run the payment sandbox on {settings['NAME']!r}: it is not the test database "
            "(request the sandbox through the payment_sandbox fixture, which uses db)"
        )
    parts = {
        "dbname": settings["NAME"],
        "host": settings.get("HOST"),
        "port": settings.get("PORT"),
        "user": settings.get("USER"),
        "password": settings.get("PASSWORD"),
    }
    return make_conninfo(**{key: str(value) for key, value in parts.items() if value})


@pytest.fixture(scope="session")
def sandbox_database_url(django_db_setup, django_db_blocker) -> str:  # noqa: ANN001
    return conninfo_of_the_test_database()


@pytest.fixture(scope="session")
def payment_sandbox_process(sandbox_database_url, tmp_path_factory) -> Iterator[SandboxProcess]:  # noqa: ANN001
    """One real sandbox process for the session, on a free port, against the test database."""
    sandbox = SandboxProcess(
        database_url=sandbox_database_url, log_path=tmp_path_factory.mktemp("payments") / "sandbox.log"
    )
    sandbox.start()
    yield sandbox
    sandbox.stop()


@pytest.fixture
def payment_sandbox(db, payment_sandbox_process) -> SandboxProcess:  # noqa: ANN001
    """The sandbox, emptied: .base_url, .reset(), .refunds(), .seed_payment(id, amount, currency), .fault(mode)."""
    # Asking for `db` is what makes pytest-django create the test database the sandbox runs on.
    if not payment_sandbox_process.healthy():  # a test crashed it on purpose and did not restart it
        payment_sandbox_process.restart()
    payment_sandbox_process.reset()
    return payment_sandbox_process


@pytest.fixture
def provider(payment_sandbox) -> PaymentProvider:  # noqa: ANN001
    return PaymentProvider(api_key="sk_test_pytest", api_base=payment_sandbox.base_url, timeout_seconds=5)


@pytest.fixture
def sandbox(payment_sandbox, settings):  # noqa: ANN001
    """The sandbox, with the app's payment adapter pointed at it."""
    settings.STRIPE_API_BASE = payment_sandbox.base_url
    refund_module._provider = None
    yield payment_sandbox
    refund_module._provider = None


@pytest.fixture
def cluster(tmp_path):  # noqa: ANN001
    """Real worker and beat processes on the test database, started by the test; all stopped after it."""
    from tests.workers import Cluster, purge_broker, purge_rounds_sent_lately, purge_stream_buffers

    purge_broker()
    purge_stream_buffers()  # ticket ids restart with each test database; old buffers would look live
    purge_rounds_sent_lately()
    started = Cluster(tmp_path)
    yield started
    started.stop_all()
    purge_broker()
    purge_stream_buffers()
    purge_rounds_sent_lately()


@contextlib.contextmanager
def silent_server(backlog: int = 8) -> Iterator[tuple[int, list[socket.socket]]]:
    """A loopback port that accepts connections and never says a word (an SMTP server with no
    greeting, a broker or a Redis that hangs): yields (port, the connections it accepted)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(backlog)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1], accepted
    finally:
        listener.close()
        for conn in accepted:
            conn.close()
