"""Redis away for a while (the broker, the Channels layer, the rate limits' cache): no message lost,
every ticket answered once when it is back, with nothing for anyone to do.

The test runs a Redis of its own on a free port, and the web server, a worker and beat on it; it
stops that Redis (killed, or frozen with SIGSTOP) while a customer writes, then starts it again on
the same port.
"""

from __future__ import annotations

import json
import signal
import socket
import time
import urllib.error
import urllib.request
import uuid
from email.message import Message as Message_
from urllib.parse import urlencode

import pytest

from agents.models import AgentRun, RunStatus
from agents.services import PARKED_NOTE
from tests.agents.test_crash_recovery import at_rest
from tests.conftest import make_customer
from tests.workers import Proc, free_port, wait_for_http, wait_until
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, Ticket, TicketStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(300)]

CSRF = "a" * 32


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        return None


_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def post(url: str, data: bytes, *, cookie: str, content_type: str) -> tuple[int, str, Message_]:
    headers = {"Cookie": cookie, "X-CSRFToken": CSRF, "Content-Type": content_type, "Referer": url}
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with _opener.open(request, timeout=60) as response:
            return response.status, response.read().decode(), response.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), exc.headers


class OwnRedis:
    """A redis-server on a free loopback port, with nothing kept on disk; stopped and started again."""

    def __init__(self, cluster) -> None:  # noqa: ANN001
        self.cluster, self.port, self.proc = cluster, free_port(), None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> OwnRedis:
        argv = ["redis-server", "--save", "", "--appendonly", "no", "--port", str(self.port), "--bind", "127.0.0.1"]
        self.proc = Proc(f"redis{len(self.cluster.procs)}", argv, {}, self.cluster.tmp_path)
        self.cluster.procs.append(self.proc)
        wait_until(self._answers, timeout=20, what="redis-server up")
        return self

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def go_away(self, how: str) -> None:
        """Killed (connections refused), or frozen (SIGSTOP: connections accepted, never answered)."""
        if how == "frozen":
            self.proc.signal(signal.SIGSTOP)
            return
        self.proc.signal(signal.SIGKILL)
        self.proc.wait_dead(10)

    def come_back(self, how: str) -> None:
        if how == "frozen":
            self.proc.signal(signal.SIGCONT)
            return
        self.start()  # a new server on the same port, empty: the broker's queued messages are gone


def signed_in(base: str, customer) -> str:  # noqa: ANN001
    """Signed in through the site's own form (its session is signed with the web process's key)."""
    form = urlencode({"username": customer.user.username, "password": "pw-for-tests-123", "csrfmiddlewaretoken": CSRF})
    status, text, headers = post(
        f"{base}/accounts/login/", form.encode(), cookie=f"csrftoken={CSRF}",
        content_type="application/x-www-form-urlencoded",
    )  # fmt: skip
    assert status == 302, (status, text[:300])
    [session] = [
        c.split(";", 1)[0].split("=", 1)[1] for c in headers.get_all("Set-Cookie") if c.startswith("sessionid=")
    ]
    return f"sessionid={session}; csrftoken={CSRF}"


def agent_replies(ticket: Ticket) -> int:
    return Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, is_public=True).count()


@pytest.fixture(autouse=True)
def _fast_password_hashing() -> None:
    """Overrides the suite's fast test hasher: the web process checks the password with its own."""


@pytest.fixture
def site(cluster):  # noqa: ANN001, ANN201
    redis = OwnRedis(cluster).start()
    port = free_port()
    web = cluster.web(port, REDIS_URL=redis.url)
    cluster.worker(REDIS_URL=redis.url, AGENT_OUTAGE_RETRY_MAX_SECONDS="3")
    cluster.beat(REDIS_URL=redis.url)
    base = f"http://127.0.0.1:{port}"
    wait_for_http(f"{base}/healthz", timeout=60, proc=web)
    return base, redis


@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_what_a_customer_sends_while_redis_is_down_is_stored_and_answered_once_when_it_is_back(cluster, site, how):
    base, redis = site
    customer = make_customer()
    cookie = signed_in(base, customer)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Kettle", body="Where is my order?")
    wait_until(lambda: at_rest(ticket), timeout=60, what="the first question answered", cluster=cluster)

    redis.go_away(how)
    body = json.dumps({"client_msg_id": uuid.uuid4().hex, "body": "And what is your return policy?"}).encode()
    status, text, _ = post(f"{base}/tickets/{ticket.pk}/messages", body, cookie=cookie, content_type="application/json")
    assert status in (200, 201), (status, text[:500], cluster.logs())
    form = urlencode({"subject": "Refund", "body": "What is your return policy?", "client_ref": uuid.uuid4().hex})
    status, text, headers = post(
        f"{base}/tickets/new/", form.encode(), cookie=cookie, content_type="application/x-www-form-urlencoded"
    )
    assert status == 302, (status, text[:500], cluster.logs())
    second = Ticket.objects.exclude(pk=ticket.pk).get(customer=customer)
    time.sleep(20)  # Redis stays away a while: the worker and beat lose it too
    redis.come_back(how)

    for each in (ticket, second):
        wait_until(lambda t=each: at_rest(t), timeout=120, what=f"#{each.pk} answered", cluster=cluster)
    for each, answers in ((ticket, 2), (second, 1)):
        each.refresh_from_db()
        assert each.status != TicketStatus.WITH_HUMAN
        assert agent_replies(each) == answers, list(Message.objects.filter(ticket=each).values_list("body", flat=True))
        assert not Message.objects.filter(ticket=each, body=PARKED_NOTE).exists()
        assert not AgentRun.objects.filter(ticket=each).exclude(status=RunStatus.COMPLETED).exists()


RING_WHILE_FROZEN = """
import sys, django
django.setup()
from agents.tasks import _send_doorbell
_send_doorbell(1)  # the broker answers: the process's connection to it is made
print("rang", flush=True)
sys.stdin.readline()  # the broker is frozen now
_send_doorbell(1)
print("rang again", flush=True)
_send_doorbell(2)  # another customer's send, a moment later
print("rang a third time", flush=True)
"""


def connections_received(redis: OwnRedis) -> int:
    import redis as redis_py

    return int(redis_py.Redis.from_url(redis.url).info("stats")["total_connections_received"])


def test_a_doorbell_to_a_frozen_redis_is_tried_once_not_once_per_publish_retry(cluster):
    """A customer's send rings its doorbell from the web request: with Celery's publish retries, each
    a new connection that a frozen Redis accepts (the kernel does) and never answers, the request was
    held for about 50 s (seen under the web server with Redis stopped by SIGSTOP). One try: the
    doorbell is lost after the broker's timeout and the sweeper rings once Redis is back. The next
    customer's doorbell, a moment later, is not tried at all (it waited out the timeout too)."""
    import subprocess
    import sys

    from tests.workers import ROOT

    redis = OwnRedis(cluster).start()
    env = {**cluster.env(), "CELERY_BROKER_URL": redis.url, "REDIS_URL": redis.url}
    ringer = subprocess.Popen(
        [sys.executable, "-c", RING_WHILE_FROZEN], cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert ringer.stdout.readline().strip() == "rang", ringer.stderr.read()[-2000:]
        before = connections_received(redis)
        redis.go_away("frozen")
        ringer.stdin.write("\n")
        ringer.stdin.flush()
        out, err = ringer.communicate(timeout=120)
    finally:
        redis.come_back("frozen")
        if ringer.poll() is None:
            ringer.kill()
    assert "rang a third time" in out, err[-2000:]
    assert "ticket 1: the doorbell could not be sent to the broker" in err
    assert "ticket 2: the doorbell is not sent, the broker failed a moment ago" in err, err[-2000:]
    # Connections made while it was frozen wait in its backlog; it takes them in once it runs again.
    time.sleep(1)
    tries = connections_received(redis) - before - 1  # less this test's own INFO
    assert tries <= 1, f"two doorbells opened {tries} connections to the frozen broker"
