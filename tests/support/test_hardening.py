"""Hardening: throttled logins and resets, safe defaults, bad input answered with 4xx, limits on volume,
and a health check that tells strangers only whether it is up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from approvals.models import ApprovalRequest
from tests.conftest import make_customer
from tests.workers import test_database_url as database_url
from tickets import services
from tickets.models import AuthorKind, Message, Ticket

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "pw-for-tests-123"
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_counters():
    from django.core.cache import cache

    cache.clear()  # rate-limit windows and lockouts of earlier tests share the Redis cache
    yield
    cache.clear()


def sign_in(client: Client, username: str, password: str, *, path: str = "/accounts/login/") -> int:
    return client.post(path, {"username": username, "password": password}).status_code


# --- 1. login throttling ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_repeated_wrong_passwords_lock_the_login_out_even_for_the_right_one(path, settings):
    settings.AXES_FAILURE_LIMIT = 5
    user = get_user_model().objects.create_user("victim", password=PASSWORD, is_staff=True)
    client = Client()

    wrong = [sign_in(client, user.username, f"guess-{n}", path=path) for n in range(5)]
    locked = client.post(path, {"username": user.username, "password": PASSWORD})

    assert wrong[:4] == [200] * 4  # the form again, with its error
    assert locked.status_code == 429
    assert "Too many failed sign-in attempts" in locked.content.decode()
    assert "_auth_user_id" not in client.session


def test_a_lockout_is_released_after_the_cool_off(settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(seconds=1)
    customer = make_customer()
    client = Client()
    for n in range(3):
        sign_in(client, customer.user.username, f"nope-{n}")
    assert sign_in(client, customer.user.username, PASSWORD) == 429

    time.sleep(1.5)

    assert sign_in(client, customer.user.username, PASSWORD) == 302
    assert client.session["_auth_user_id"] == str(customer.user.pk)


def test_a_lockout_released_by_staff_lets_the_customer_in_at_once(settings):
    settings.AXES_FAILURE_LIMIT = 3
    customer = make_customer()
    client = Client()
    for n in range(3):
        sign_in(client, customer.user.username, f"nope-{n}")
    assert sign_in(client, customer.user.username, PASSWORD) == 429

    from axes.utils import reset

    reset(username=customer.user.username)

    assert sign_in(client, customer.user.username, PASSWORD) == 302


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
@pytest.mark.parametrize("length", [256, 5000])
def test_a_username_longer_than_any_account_is_a_failed_sign_in_not_a_server_error(path, length):
    """Django's login form checked the username's length in the browser only: the sign-in was tried,
    and django-axes stored the failure in its varchar(255) column, a 500."""
    client = Client(raise_request_exception=False)
    response = client.post(path, {"username": "u" * length, "password": "whatever"})
    assert response.status_code == 200  # the form again, saying the sign-in failed
    assert response.context["form"].errors and "_auth_user_id" not in client.session


def test_password_reset_requests_are_limited_per_address(settings):
    settings.PASSWORD_RESET_RATE_PER_EMAIL = "3/h"
    customer = make_customer()
    customer.user.email = customer.email
    customer.user.save(update_fields=["email"])
    client = Client()

    answers = [client.post("/accounts/password_reset/", {"email": customer.email}) for _ in range(5)]

    assert [a.status_code for a in answers] == [302, 302, 302, 429, 429]
    assert answers[-1]["Retry-After"].isdigit()
    assert len(mail.outbox) == 3


# --- 3. safe defaults -------------------------------------------------------------------------------------

PRODUCTION_ENV = {
    "DEBUG": "0",
    "SECRET_KEY": "a-production-secret-key-of-sixty-characters-0123456789-abcdefgh",
    "ALLOWED_HOSTS": "support.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://support.example.com",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "1",
    "SECURE_HSTS_PRELOAD": "1",
    "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO,https",
}


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    from django.conf import settings

    environ = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY", "DJANGO_SETTINGS_MODULE"}}
    environ.update({"DATABASE_URL": database_url(), "REDIS_URL": settings.REDIS_URL, **env})
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )


def test_check_deploy_finds_nothing_under_the_documented_production_environment():
    result = manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION_ENV)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_debug_is_off_and_mail_is_not_printed_unless_asked():
    script = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.DEBUG, settings.EMAIL_BACKEND, settings.DEMO_DATA, settings.SESSION_COOKIE_SECURE)"
    )
    environ = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "EMAIL_BACKEND", "DEMO_DATA"}}
    environ.update({"DJANGO_SETTINGS_MODULE": "support.settings", "SECRET_KEY": "k" * 60})
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=environ, capture_output=True, text=True)

    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "django.core.mail.backends.smtp.EmailBackend", "False", "True"]


def test_demo_logins_are_not_seeded_with_debug_off_unless_asked():
    refused = manage("seed_demo", DEBUG="0", SECRET_KEY="k" * 60)
    assert refused.returncode == 0 and "not demo mode" in refused.stdout
    assert not get_user_model().objects.filter(username="staff").exists()

    asked = manage("seed_demo", DEBUG="0", SECRET_KEY="k" * 60, DEMO_DATA="1")
    assert asked.returncode == 0, asked.stderr
    assert get_user_model().objects.filter(username="staff", is_superuser=True).exists()


def test_every_page_carries_a_content_security_policy(client):
    policy = client.get("/accounts/login/")["Content-Security-Policy"]

    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "object-src 'none'" in policy


# --- 4. bad input: a clear 400, nothing stored ------------------------------------------------------------


@pytest.fixture
def customer_client():
    customer = make_customer()
    client = Client()
    client.force_login(customer.user)
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    return customer, client, ticket


def counts() -> tuple[int, int, int]:
    return Ticket.objects.count(), Message.objects.count(), ApprovalRequest.objects.count()


@pytest.mark.parametrize(
    ("kind", "payload"),
    [
        ("form", {"subject": "Broken\x00kettle", "body": "It leaks", "client_ref": "r1"}),
        ("form", {"subject": "", "body": "It\x00 leaks", "client_ref": "r2"}),
        ("form", {"subject": "", "body": "It leaks", "client_ref": "r\x003"}),
        ("json", {"client_msg_id": "m1", "body": "hello\x00"}),
        ("json", {"client_msg_id": "m\x002", "body": "hello"}),
        ("raw", '{"client_msg_id": "m3", "body": "lone \\ud800 surrogate"}'),
        ("raw", "[" * 50_000 + "]" * 50_000),
        ("raw", '{"client_msg_id": "m4", "body": ' + "[" * 50_000 + "]" * 50_000 + "}"),
        # A key named twice: which one counts is the parser's choice, and the other is lost unread.
        ("raw", '{"client_msg_id": "m5", "body": "refund it", "body": "do not refund it"}'),
        ("raw", '{"client_msg_id": "m6", "client_msg_id": "m7", "body": "hello"}'),
        ("query", "/tickets/?q=%00"),
        ("login", {"username": "al\x00ice", "password": "x"}),
    ],
)
def test_unstorable_input_is_a_clear_400_and_stores_nothing(customer_client, kind, payload):
    _, client, ticket = customer_client
    before = counts()
    if kind == "form":
        response = client.post("/tickets/new/", payload)
    elif kind == "json":
        response = client.post(f"/tickets/{ticket.pk}/messages", json.dumps(payload), content_type="application/json")
    elif kind == "raw":
        response = client.post(f"/tickets/{ticket.pk}/messages", payload, content_type="application/json")
    elif kind == "query":
        response = client.get(payload)
    else:
        response = Client().post("/accounts/login/", payload)

    assert response.status_code == 400, response.content[:300]
    assert b"Traceback" not in response.content
    assert counts() == before


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.text(max_size=300), client_msg_id=st.text(max_size=120))
def test_any_message_text_is_stored_or_refused_never_a_server_error(customer_client, body, client_msg_id):
    _, client, ticket = customer_client
    from django.core.cache import cache

    cache.clear()  # the rate limit is not what this property is about
    before = Message.objects.filter(ticket=ticket).count()
    response = client.post(
        f"/tickets/{ticket.pk}/messages",
        json.dumps({"client_msg_id": client_msg_id, "body": body}),
        content_type="application/json",
    )

    assert response.status_code in {200, 201, 400, 409}, (response.status_code, response.content[:200])
    after = Message.objects.filter(ticket=ticket).count()
    if response.status_code == 201:
        assert after == before + 1
    else:
        assert after == before


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(subject=st.text(max_size=250), body=st.text(max_size=300), client_ref=st.text(max_size=120))
def test_any_new_ticket_form_opens_one_ticket_or_is_refused_never_a_server_error(
    customer_client, subject, body, client_ref
):
    _, client, _ = customer_client
    from django.core.cache import cache

    cache.clear()
    before = Ticket.objects.count()
    response = client.post("/tickets/new/", {"subject": subject, "body": body, "client_ref": client_ref})

    assert response.status_code in {302, 400}, (response.status_code, response.content[:200])
    assert Ticket.objects.count() - before == (1 if response.status_code == 302 else 0) or (
        response.status_code == 302 and Ticket.objects.count() == before  # a client_ref seen before
    )


# --- 5. limits on volume ----------------------------------------------------------------------------------


def test_a_burst_of_messages_is_cut_off_with_429_and_retry_after(customer_client, settings):
    settings.CUSTOMER_MESSAGE_RATE = "8/h"  # a window that a one-second burst does not straddle
    _, client, ticket = customer_client
    before = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER).count()

    answers = [
        client.post(
            f"/tickets/{ticket.pk}/messages",
            json.dumps({"client_msg_id": f"burst-{n}", "body": f"message {n}"}),
            content_type="application/json",
        )
        for n in range(20)
    ]

    statuses = [a.status_code for a in answers]
    assert statuses[:8] == [201] * 8 and set(statuses[8:]) == {429}
    assert all(int(a["Retry-After"]) >= 1 for a in answers[8:])
    assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER).count() == before + 8
    # A retried send of a stored message is answered with the original, limit or not.
    again = client.post(
        f"/tickets/{ticket.pk}/messages",
        json.dumps({"client_msg_id": "burst-0", "body": "message 0"}),
        content_type="application/json",
    )
    assert again.status_code == 200


def test_new_tickets_are_limited_per_customer(customer_client, settings):
    settings.CUSTOMER_TICKET_RATE = "3/h"
    customer, client, _ = customer_client
    before = Ticket.objects.filter(customer=customer).count()

    answers = [client.post("/tickets/new/", {"body": f"Question {n}", "client_ref": f"ref-{n}"}) for n in range(5)]

    assert [a.status_code for a in answers] == [302, 302, 302, 429, 429]
    assert answers[-1]["Retry-After"].isdigit()
    assert Ticket.objects.filter(customer=customer).count() == before + 3


# --- 6. the health check ----------------------------------------------------------------------------------


def test_health_tells_strangers_only_whether_it_is_up(client):
    public = client.get("/healthz", REMOTE_ADDR="203.0.113.9")
    local = client.get("/healthz", REMOTE_ADDR="127.0.0.1")

    assert public.status_code == 200 and public.json() == {"status": "ok"}
    assert "worker" in local.json() and local.json()["database"]["ok"] is True


def test_health_details_for_staff_from_anywhere(client):
    staff = get_user_model().objects.create_user("ops", password=PASSWORD, is_staff=True)
    client.force_login(staff)

    body = client.get("/healthz", REMOTE_ADDR="203.0.113.9").json()

    assert body["status"] == "ok" and "workers" in body["worker"]
