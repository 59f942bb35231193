"""The real product for Playwright: daphne and a Celery worker against the test database,
driven by Debian's headless Chromium (never a downloaded browser)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import expect

from agents.models import AgentRun, RunStatus
from tests.workers import ROOT, Cluster, free_port, purge_broker, purge_stream_buffers, wait_for_http, wait_until
from tickets.models import AuthorKind, Customer, Message, TicketStatus

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORD = "pw-for-tests-123"  # what tests.conftest.make_customer sets
SCREENSHOTS = ROOT / "test-results" / "browser"


@dataclass
class Stack:
    base_url: str
    cluster: Cluster

    def url(self, path: str) -> str:
        return self.base_url + path

    def ws_url(self, path: str) -> str:
        return "ws" + self.base_url.removeprefix("http") + path


# How long a page action or an ``expect(...)`` assertion waits (Playwright's default for an assertion is
# 5 s): a page's live update (a ring through Redis, a worker's step, a read over HTTP) can take far
# longer on a busy host, and a check that is met returns at once.
PAGE_TIMEOUT_MS = 30_000
expect.set_options(timeout=PAGE_TIMEOUT_MS)


@pytest.fixture(autouse=True)
def _fast_password_hashing() -> None:
    """Overrides the suite's fast test hasher: the web process must verify these passwords with its own."""


@pytest.fixture(scope="module")
def _orm_beside_playwright() -> Iterator[None]:
    # Playwright's sync API keeps an event loop in this thread, and Django then
    # refuses ORM calls from it. The servers under test run without this.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        yield


@pytest.fixture(scope="module")
def browser(_orm_beside_playwright):  # noqa: ANN001, ANN201
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        message = f"{CHROMIUM} is missing: apt-get install -y chromium (or set CHROMIUM)"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI installs it (.ci/run): a missing browser there is a failure
        pytest.skip(message)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@contextlib.contextmanager
def running_stack(folder: Path, *, token_delay_ms: int, **env: str) -> Iterator[Stack]:
    """daphne + one worker (the offline model streaming at ``token_delay_ms`` a token), with ``env``
    for both; everything stopped and the broker and stream buffers emptied afterwards."""
    purge_broker()
    purge_stream_buffers()
    cluster = Cluster(folder)
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    try:
        web = cluster.web(port, **env)
        worker = cluster.worker(OFFLINE_MODEL_TOKEN_DELAY_MS=str(token_delay_ms), **env)
        wait_for_http(base_url + "/accounts/login/", timeout=30, proc=web)
        wait_until(lambda: "ready." in worker.log(), timeout=30, what="the worker to start", cluster=cluster)
        yield Stack(base_url, cluster)
    finally:
        cluster.stop_all()
        purge_broker()
        purge_stream_buffers()


@pytest.fixture(scope="module")
def stack(_orm_beside_playwright, django_db_setup, tmp_path_factory) -> Iterator[Stack]:  # noqa: ANN001
    """daphne + one worker streaming at 40 ms a token, for the module; the database is emptied per test."""
    with running_stack(tmp_path_factory.mktemp("stack"), token_delay_ms=40) as started:
        yield started


def agent_at_rest() -> bool:
    """No run going on, and no customer message the agent has yet to handle on a ticket it may answer."""
    return (
        not AgentRun.objects.filter(status=RunStatus.RUNNING).exists()
        and not Message.objects.filter(author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True)
        .exclude(ticket__status__in=[TicketStatus.WITH_HUMAN, TicketStatus.CLOSED])
        .exists()
    )


@pytest.fixture
def live(stack, transactional_db) -> Iterator[Stack]:  # noqa: ANN001
    """The stack, for a test whose rows the servers must see (committed, emptied afterwards)."""
    yield stack
    # Let the worker finish what the test started before the tables are emptied under it.
    wait_until(agent_at_rest, timeout=30, what="the agent to finish its runs", cluster=stack.cluster)
    # No doorbell left to ring, and no worker inside a ticket's lease (it holds the ticket's
    # advisory lock there): emptying the tables then cannot deadlock with a worker's writes.
    purge_broker()
    wait_until(lambda: not _lease_locks_held(), timeout=30, what="the workers to let go of every lease")


def _lease_locks_held() -> bool:
    from django.db import connection

    from agents.lease import LOCK_NAMESPACE

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = %s "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",  # not another run's
            [LOCK_NAMESPACE],
        )
        return bool(cursor.fetchone()[0])


def sign_in(browser, stack: Stack, customer: Customer):  # noqa: ANN001, ANN201
    """A fresh browser context signed in as ``customer`` through the login form; returns its page."""
    context = browser.new_context(viewport={"width": 1100, "height": 820})
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    # Every page records what its Content-Security-Policy blocked (tests assert it stays empty).
    context.add_init_script(
        "window.__csp = []; document.addEventListener('securitypolicyviolation', "
        "e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"
    )
    page = context.new_page()
    page.goto(stack.url("/accounts/login/"))
    page.fill("#id_username", customer.user.username)
    page.fill("#id_password", PASSWORD)
    page.click("main form button[type=submit]")
    page.wait_for_url(stack.url("/tickets/"))
    return page


def fail_the_first_read(page, url_pattern: str) -> list[str]:  # noqa: ANN001
    """Answer the page's first request whose address matches ``url_pattern`` with a 503 (a moment
    without a database connection) and let every later one through; returns the list of the failed
    addresses, which the test reads once the page has recovered."""
    failed: list[str] = []

    def fail_once(route) -> None:  # noqa: ANN001
        if failed:
            route.continue_()
            return
        failed.append(route.request.url)
        route.fulfill(status=503, body="Back in a moment")

    page.route(re.compile(url_pattern), fail_once)
    return failed


def sockets_that_can_go_silent(page, url_pattern: str) -> list[dict[str, bool]]:  # noqa: ANN001
    """Relay the page's sockets whose address matches ``url_pattern`` to the server; returns a switch per
    socket opened, in order. Set one's ``"up"`` to False and that socket carries nothing more either way
    and never closes: a half-open connection (a laptop that changed networks), which the browser may not
    see end for many minutes."""
    links: list[dict[str, bool]] = []

    def relay(ws) -> None:  # noqa: ANN001
        server = ws.connect_to_server()
        link = {"up": True}
        ws.on_message(lambda frame: server.send(frame) if link["up"] else None)
        server.on_message(lambda frame: ws.send(frame) if link["up"] else None)
        links.append(link)

    page.route_web_socket(re.compile(url_pattern), relay)
    return links
