"""Settings, read from the environment.

Every setting that matters in production comes from an environment variable;
see the README's Configuration table. Missing or malformed values fail at start
with a message that names the variable to set.
"""

from __future__ import annotations

import json
import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from support import embedded

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; set it to 1/0, true/false, yes/no or on/off")


def env_int(name: str, default: int, *, minimum: int = 0, maximum: int | None = None) -> int:
    """A whole number from the environment (empty: the default), within its bounds: a value out of
    them stops the process at start, naming the variable, rather than misbehaving later."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a whole number") from None
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f"at least {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise ImproperlyConfigured(f"{name}={raw!r} is out of range; it must be {bounds}")
    return value


def env_str(name: str, default: str) -> str:
    """A string from the environment; empty means the default, as for every other variable."""
    raw = os.environ.get(name)
    return default if raw is None or raw.strip() == "" else raw.strip()


# The longest timeout a setting may give: a day. Far past it a wait or a socket refuses the value
# (OverflowError past about 9.2e9 s), at every call rather than at start.
MAX_TIMEOUT_SECONDS = 86_400.0
# The longest interval of one of beat's rounds: a day. Far past it beat stops at its start ("date value
# out of range"), and no round (the sweep that rings lost doorbells and dead owners' tickets) ever runs.
MAX_INTERVAL_SECONDS = 86_400


def env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number of seconds") from None
    if not value > 0 or value > MAX_TIMEOUT_SECONDS:
        raise ImproperlyConfigured(
            f"{name}={raw!r} must be a positive number of seconds, at most {MAX_TIMEOUT_SECONDS:g} (a day)"
        )
    return value


def env_rate(name: str, default: str) -> str:
    """A rate as django-ratelimit reads it: a count per period, "8/10s", "10/h", "3/d"."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if not re.fullmatch(r"[1-9]\d*/(?:[1-9]\d*)?[smhd]", raw.strip()):
        raise ImproperlyConfigured(f"{name}={raw!r} is not a rate; write a count per period: 8/10s, 10/m, 10/h or 3/d")
    return raw.strip()


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def shown_url(url: str) -> str:
    """A URL as a message may show it: its password, if any, left out."""
    parsed = urlparse(url)
    if parsed.password is None:
        return url
    netloc = parsed.netloc.replace(f":{parsed.password}@", ":***@", 1)
    return parsed._replace(netloc=netloc).geturl()


def check_address(name: str, url: str, schemes: set[str], *, host_required: bool = True) -> str:
    """An address from the environment, read as the clients that use it will read it: a scheme they
    speak, a host, a port that is a number in range, and (Redis) a database that is a number. A
    malformed one stops the process at start, naming the variable; it used to start every process
    and fail (or, a Redis database that is not a number, quietly use database 0) at its first use."""
    try:
        parsed = urlparse(url)
        port = parsed.port  # raises for a port that is not a number, or out of range
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={shown_url(url)!r} is malformed: {exc}") from None
    expected = " or ".join(f"{scheme}://" for scheme in sorted(schemes))
    if parsed.scheme not in schemes:
        raise ImproperlyConfigured(f"{name}={shown_url(url)!r} must start with {expected}")
    if host_required and not parsed.hostname:
        raise ImproperlyConfigured(f"{name}={shown_url(url)!r} names no host; write {expected}HOST[:PORT]")
    if port == 0:
        raise ImproperlyConfigured(f"{name}={shown_url(url)!r} is malformed: port 0 is no port")
    if parsed.scheme in {"redis", "rediss"} and not re.fullmatch(r"/?(\d+)?", parsed.path):
        raise ImproperlyConfigured(
            f"{name}={shown_url(url)!r}: the Redis database must be a number, as in redis://HOST:6379/0"
        )
    return url


# Off unless asked for: `make run` and `make test` turn it on; production never should.
DEBUG = env_bool("DEBUG", False)

SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY.strip():  # blank is not set: spaces are no secret
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY is not set; it is required when DEBUG is off")
    SECRET_KEY = "dev-only-insecure-secret-key-set-SECRET_KEY-in-production"

# State bundles (state/): export_state signs a bundle with this key, restore_state and verify_state
# check the signature with it; the same value on both deployments. Not set, they refuse unless told
# --allow-unsigned. Long enough that a signed bundle in hand cannot be used to guess it.
STATE_BUNDLE_KEY = env_str("STATE_BUNDLE_KEY", "")
STATE_BUNDLE_KEY_MIN_CHARS = 32
if STATE_BUNDLE_KEY and len(STATE_BUNDLE_KEY) < STATE_BUNDLE_KEY_MIN_CHARS:
    raise ImproperlyConfigured(
        f"STATE_BUNDLE_KEY is {len(STATE_BUNDLE_KEY)} characters; it must be at least {STATE_BUNDLE_KEY_MIN_CHARS} "
        "(make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
    )

# Demo customers, orders and the `staff` login (tickets.demo): only in demo mode, never with DEBUG
# off unless asked for with DEMO_DATA=1.
DEMO_DATA = env_bool("DEMO_DATA", DEBUG)

# A key marked "django-insecure-" (Django's mark; the one docker-compose.yml gives for trying the
# product) is published: anyone can sign sessions and password-reset links with it. Demo mode
# publishes its superuser's password anyway; anywhere else with DEBUG off it is refused.
if not DEBUG and not DEMO_DATA and SECRET_KEY.startswith("django-insecure-"):
    raise ImproperlyConfigured(
        "SECRET_KEY is a published placeholder (it starts with django-insecure-); set your own, 50+ random "
        "characters: python -c 'import secrets; print(secrets.token_urlsafe(50))' (or DEMO_DATA=1 to try the "
        "demo on your own machine)"
    )

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG else [])
for _host in ALLOWED_HOSTS:
    # Django matches a Host header's name, its port left out: an entry written as a URL or with a port
    # or a path never matches, and every request was a bare 400 with no word of why.
    if not re.fullmatch(r"\*|\.?[^\s/:\[\]@?#]+|\[[0-9A-Fa-f:.]+\]", _host):
        raise ImproperlyConfigured(
            f"ALLOWED_HOSTS={','.join(ALLOWED_HOSTS)!r}: {_host!r} is not a host name; write each as the name alone, "
            "without scheme, port or path: support.example.com, .example.com (and its subdomains), [::1] or *"
        )
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
for _origin in CSRF_TRUSTED_ORIGINS:
    # An origin is a scheme and a host (a port too, if not the scheme's): without its scheme it never
    # matches, and forms and sockets from that site are refused with no word of why.
    if not re.fullmatch(r"https?://[^/?#\s]+", _origin):
        raise ImproperlyConfigured(
            f"CSRF_TRUSTED_ORIGINS={','.join(CSRF_TRUSTED_ORIGINS)!r}: {_origin!r} is not an origin; "
            "write each as scheme://host[:port], e.g. https://support.example.com"
        )
    check_address("CSRF_TRUSTED_ORIGINS", _origin.replace("*.", "", 1), {"http", "https"})
# A form from a page older than the sign-in (signed in again in another tab, or the session ended) is
# refused with the product's page (templates/403_csrf.html), which says nothing was done, not Django's.
CSRF_FAILURE_VIEW = "support.views.csrf_failure"

INSTALLED_APPS = [
    "daphne",
    "support.admin_site.SupportAdminConfig",  # Django's admin, its bulk actions' selections checked
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "channels",
    "tickets",
    "agents",
    "approvals",
    "payments",
    "staff",
    "state",
    "axes",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    # Serves the admin's and the pages' static files from the ASGI process.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # Pages of a browser holding a session are not stored (Back after signing out shows no chat).
    "support.middleware.SignedInPagesNotStored",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # After the others, as django-axes asks: locks out repeated failed logins (customers, staff, admin).
    "axes.middleware.AxesMiddleware",
    # NUL characters, lone surrogates, JSON nested beyond reason: a clear 400 before any view.
    # Innermost, and synchronous only: under ASGI, Django then runs every middleware above it in
    # sync mode, in the request's thread, instead of switching between the event loop and that
    # thread for each one's request and response steps (six switches per request, not sixteen).
    "support.middleware.RejectUnstorableInput",
]

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    # Failed sign-ins per address and per account (support/login_limits.py).
    "support.login_limits.SignInLimits",
    "django.contrib.auth.backends.ModelBackend",
]

ROOT_URLCONF = "support.urls"
ASGI_APPLICATION = "support.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database: DATABASE_URL, or the embedded PostgreSQL --------------------------

DATABASE_URL = os.environ.get("DATABASE_URL") or embedded.postgres_running_url()
if not DATABASE_URL:
    raise ImproperlyConfigured(
        "DATABASE_URL is not set and the embedded PostgreSQL is not running. "
        "Set DATABASE_URL=postgres://USER:PASSWORD@HOST:PORT/NAME, or run through "
        "`make run` / `make test` / `python -m support.embedded -- COMMAND`, which start it."
    )
try:
    _db = dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 0))
except ValueError as exc:
    raise ImproperlyConfigured(f"DATABASE_URL is malformed: {exc}") from None
if _db.get("ENGINE") != "django.db.backends.postgresql":
    raise ImproperlyConfigured(
        f"DATABASE_URL must point at PostgreSQL (postgres://...); got engine {_db.get('ENGINE')!r}. "
        "This product relies on PostgreSQL locks, constraints and full-text search."
    )
if not _db.get("NAME"):
    # Django asks for one at the first query, not at start: every request was a 500 until then.
    raise ImproperlyConfigured(
        f"DATABASE_URL={shown_url(DATABASE_URL)!r} names no database; write postgres://USER:PASSWORD@HOST:PORT/NAME"
    )
# Parameters travel apart from the SQL (server-side binding): no quoting of large JSON values in
# Python, and statements run often are prepared once per connection.
_db.setdefault("OPTIONS", {}).setdefault("server_side_binding", env_bool("DB_SERVER_SIDE_BINDING", True))
if _db["OPTIONS"]["server_side_binding"]:
    _db["OPTIONS"].setdefault("prepare_threshold", env_int("DB_PREPARE_THRESHOLD", 2))


# What a database connection can take. PostgreSQL's session settings in milliseconds (tcp_user_timeout,
# idle_in_transaction_session_timeout) are 32-bit integers: past that the server refuses the session.
# Linux refuses a keepalive idle time or interval past 32767 s and more than 127 probes (libpq's
# setsockopt fails). Either way no connection could be made, and every request and pass failed.
MAX_POSTGRES_INT = 2_147_483_647
MAX_KEEPALIVE_SECONDS = 32_767
MAX_KEEPALIVE_PROBES = 127


def database_connect_timeout() -> int:
    """DB_CONNECT_TIMEOUT: at least 2 s (libpq's floor), at most a day (past what a wait holds, every
    connection attempt failed with an OverflowError)."""
    return env_int("DB_CONNECT_TIMEOUT", 5, minimum=2, maximum=int(MAX_TIMEOUT_SECONDS))


def database_keepalive_options(options: dict[str, object]) -> dict[str, object]:
    """TCP keepalives on both ends of every database connection, so a peer cut off by the network
    is noticed in seconds, not after the kernel's two hours (or fifteen minutes of retransmits).

    The server's end matters most: a worker that holds a ticket's lease holds its session-level
    advisory lock (agents.lease), and PostgreSQL lets that lock go only once it sees the session
    dead. ``tcp_keepalives_*`` and ``tcp_user_timeout`` are per-session server settings, sent here
    in the connection's ``options``, so no change to postgresql.conf is needed (a pooler that drops
    startup options, such as PgBouncer, needs them in the server's configuration instead). The
    client's end (libpq's ``keepalives_*``, ``tcp_user_timeout``) makes the process itself give up
    on a dead connection, and ``connect_timeout`` bounds a connection attempt to a host that does
    not answer. Unix-socket connections ignore all of it. DB_KEEPALIVES_IDLE=0 leaves the
    operating system's defaults.
    """
    idle = env_int("DB_KEEPALIVES_IDLE", 5, maximum=MAX_KEEPALIVE_SECONDS)
    interval = env_int("DB_KEEPALIVES_INTERVAL", 2, minimum=1, maximum=MAX_KEEPALIVE_SECONDS)
    count = env_int("DB_KEEPALIVES_COUNT", 3, minimum=1, maximum=MAX_KEEPALIVE_PROBES)
    user_timeout_ms = env_int("DB_TCP_USER_TIMEOUT_MS", 10_000, maximum=MAX_POSTGRES_INT)
    options.setdefault("connect_timeout", database_connect_timeout())
    if idle <= 0:
        return options
    options.update(
        {
            "keepalives": 1,
            "keepalives_idle": idle,
            "keepalives_interval": interval,
            "keepalives_count": count,
            "tcp_user_timeout": user_timeout_ms,
        }
    )
    server = (
        f"-c tcp_keepalives_idle={idle} -c tcp_keepalives_interval={interval} "
        f"-c tcp_keepalives_count={count} -c tcp_user_timeout={user_timeout_ms}"
    )
    options["options"] = f"{options['options']} {server}" if options.get("options") else server
    return options


# A session idle inside an open transaction this long is ended by the server: a worker stopped
# between a fenced write and its COMMIT (SIGSTOP, a frozen VM; its TCP session stays alive) would
# otherwise hold the ticket's lease row, and every worker rung for the ticket would wait behind it.
# Nothing of ours waits inside a transaction (model and provider calls run outside one).
DB_IDLE_IN_TRANSACTION_TIMEOUT_MS = env_int("DB_IDLE_IN_TRANSACTION_TIMEOUT_MS", 30_000, maximum=MAX_POSTGRES_INT)


# PostgreSQL compiles a query with LLVM once its estimated cost passes ``jit_above_cost``: ten thousand
# paused tickets put the sweep's query there, and every sweep (every few seconds) spent about 700 ms
# compiling a query that ran in 5 ms. The product's queries are short ones over few rows: its sessions
# run without JIT unless DB_JIT=1 asks for the server's own setting.
DB_JIT = env_bool("DB_JIT", False)


def database_session_limits(options: dict[str, object]) -> dict[str, object]:
    limits = []
    if DB_IDLE_IN_TRANSACTION_TIMEOUT_MS > 0:
        limits.append(f"-c idle_in_transaction_session_timeout={DB_IDLE_IN_TRANSACTION_TIMEOUT_MS}")
    if not DB_JIT:
        limits.append("-c jit=off")
    if limits:
        limit = " ".join(limits)
        options["options"] = f"{options['options']} {limit}" if options.get("options") else limit
    return options


database_keepalive_options(_db["OPTIONS"])
database_session_limits(_db["OPTIONS"])


def database_pool_options(db: dict[str, Any]) -> None:
    """Lend connections from a pool (psycopg_pool, through Django) instead of opening one per request.

    The web process runs each request in a thread of its own, so without a pool every request,
    and every chat socket's ledger read, paid for a new PostgreSQL connection (a TCP handshake,
    a server process, the session settings) and lost its prepared statements. A connection is
    checked before it is lent, so one that died while idle (a database restart) is replaced, not
    handed to a customer's request; a request waits at most DB_POOL_TIMEOUT for a connection
    (then the "back in a moment" 503). Persistent connections (DB_CONN_MAX_AGE above 0) and a
    pool exclude each other: with DB_CONN_MAX_AGE set, there is no pool. Celery workers keep a
    connection of their own instead (support.celery): the ticket's lease is a session-level lock.
    """
    if not env_bool("DB_POOL", True) or db.get("CONN_MAX_AGE"):
        return
    options = db["OPTIONS"]
    db["CONN_HEALTH_CHECKS"] = True  # the pool's check before lending
    min_size, max_size = env_int("DB_POOL_MIN_SIZE", 2), env_int("DB_POOL_MAX_SIZE", 10, minimum=1)
    if min_size > max_size:  # psycopg_pool refuses it at the first query, naming neither variable
        raise ImproperlyConfigured(
            f"DB_POOL_MIN_SIZE={min_size} is over DB_POOL_MAX_SIZE={max_size}; the pool keeps at least the first "
            "and lends at most the second"
        )
    options["pool"] = {
        "min_size": min_size,
        "max_size": max_size,
        "timeout": float(
            env_int("DB_POOL_TIMEOUT", database_connect_timeout(), minimum=1, maximum=int(MAX_TIMEOUT_SECONDS))
        ),
        "reset": release_session_locks,
    }


def release_session_locks(conn: Any) -> None:
    """A connection goes back to the pool holding no session-level lock. A ticket's lease lock
    belongs to the session that took it and goes when that session ends (agents.lease); a pooled
    session outlives whoever borrowed it, so it lets such locks go when it is given back."""
    if conn.autocommit:  # Django's way: one round trip, no BEGIN/COMMIT around it
        conn.execute("SELECT pg_advisory_unlock_all()")
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_unlock_all()")


database_pool_options(_db)
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: REDIS_URL, or the embedded Redis --------------------------------------

REDIS_URL = os.environ.get("REDIS_URL") or embedded.redis_running_url()
if not REDIS_URL:
    raise ImproperlyConfigured(
        "REDIS_URL is not set and the embedded Redis is not running. "
        "Set REDIS_URL=redis://HOST:PORT/DB, or run through `make run` / `make test`."
    )
if urlparse(REDIS_URL).scheme not in {"redis", "rediss"}:
    raise ImproperlyConfigured(f"REDIS_URL must start with redis:// or rediss://; got {shown_url(REDIS_URL)!r}")
check_address("REDIS_URL", REDIS_URL, {"redis", "rediss"}, host_required=False)

# Shared by every web process: login lockouts and rate limits count across all of them.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": env_str("CACHE_PREFIX", "support"),
        # One connection pool per process, not one per request thread. A Redis that does not answer
        # (frozen, or a network that swallows the session) fails the command after a few seconds
        # instead of holding the request for as long as TCP waits.
        "OPTIONS": {
            "pool_class": "support.cache.SharedConnectionPool",
            "socket_timeout": 3,
            "socket_connect_timeout": 3,
        },
    }
}

# Prefix of the Channels layer's Redis keys (and of the streamed-answer buffers).
CHANNELS_PREFIX = env_str("CHANNELS_PREFIX", "asgi")
CHANNEL_LAYERS = {
    "default": {
        # Redis Pub/Sub: a group is one Redis channel, so a live update is one PUBLISH (sent by
        # tickets.realtime from the worker's own thread), kept nowhere when nobody watches.
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {
            # redis-py 8 gives up reading after 5 s unless told otherwise; above that, a dead Redis
            # is still noticed.
            "hosts": [{"address": REDIS_URL, "socket_timeout": 15}],
            "prefix": CHANNELS_PREFIX,
        },
    },
}

# --- Celery (every name checked against the Celery 5.6 configuration docs) -------

# The broker: Redis (REDIS_URL) unless CELERY_BROKER_URL names another, e.g. RabbitMQ
# (amqp://user:password@host:5672/vhost). Redis stays the Channels layer and the cache.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or REDIS_URL
BROKER_IS_AMQP = urlparse(CELERY_BROKER_URL).scheme in {"amqp", "amqps", "pyamqp"}
if urlparse(CELERY_BROKER_URL).scheme not in {"redis", "rediss", "amqp", "amqps", "pyamqp"}:
    raise ImproperlyConfigured(
        f"CELERY_BROKER_URL must start with redis://, rediss:// or amqp://; got {shown_url(CELERY_BROKER_URL)!r}"
    )
check_address(
    "CELERY_BROKER_URL", CELERY_BROKER_URL, {"redis", "rediss", "amqp", "amqps", "pyamqp"}, host_required=False
)
CELERY_RESULT_BACKEND = None  # the ledger is Postgres; task results are never read
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
# At-least-once delivery: a message is acknowledged after the task returns, and
# requeued if the worker process dies. advance_ticket is idempotent, so a
# redelivery is harmless.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
if BROKER_IS_AMQP:
    # RabbitMQ: publisher confirms, so a doorbell is on the broker when `delay` returns. A
    # message unacknowledged when its consumer's connection dies is requeued at once. RabbitMQ
    # cancels a consumer that holds a delivery longer than its consumer_timeout (30 min by
    # default): the task time limit (11 min) and the longest retry countdown (5 min) stay under it.
    # Classic durable queues (Celery's default): quorum queues are not what the tests run.
    # The transport options are py-amqp Connection arguments (kombu passes them through; there is
    # no confirm_timeout among them). Its sockets wait forever unless given a timeout: a publish to
    # a broker that stopped answering (hung, or a network that swallows the session) waited for
    # its confirm without end, in the web request or the worker sending the doorbell. A read or
    # write that gets no answer in 10 s now fails the publish, as with Redis below. (Workers read
    # their deliveries only when the socket is readable, so an idle queue trips no timeout.)
    CELERY_BROKER_TRANSPORT_OPTIONS = {"confirm_publish": True, "read_timeout": 10, "write_timeout": 10}
else:
    # Redis: time limits stay well below the visibility timeout, so a message is never
    # redelivered while its first delivery is still legitimately running. Kombu's Redis sockets
    # have no timeout unless given one: a doorbell sent to a broker that hung (stopped, or a
    # network that swallows the session) would hold the web request or the worker sending it.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600, minimum=1),
        "socket_timeout": 10,
        "socket_connect_timeout": 5,
    }
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 600, minimum=1)
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 660, minimum=1)
if CELERY_TASK_SOFT_TIME_LIMIT >= CELERY_TASK_TIME_LIMIT:
    # Never reached: the pass would be killed at the hard limit without being asked to stop first.
    raise ImproperlyConfigured(
        f"CELERY_TASK_SOFT_TIME_LIMIT={CELERY_TASK_SOFT_TIME_LIMIT} must be below "
        f"CELERY_TASK_TIME_LIMIT={CELERY_TASK_TIME_LIMIT}: a task is asked to stop at the first, killed at the second"
    )
if not BROKER_IS_AMQP and CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] <= CELERY_TASK_TIME_LIMIT:
    raise ImproperlyConfigured(
        f"CELERY_VISIBILITY_TIMEOUT={CELERY_BROKER_TRANSPORT_OPTIONS['visibility_timeout']} must be above "
        f"CELERY_TASK_TIME_LIMIT={CELERY_TASK_TIME_LIMIT}: Redis would deliver a task again while it still runs"
    )
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE_FILENAME = str(embedded.VAR_DIR / "celerybeat-schedule")

# --- The agent ---------------------------------------------------------------------

OPENAI_API_KEY = os.environ.get("OPENAI_API_KEY", "")
OPENAI_BASE_URL = os.environ.get("OPENAI_BASE_URL", "")
if OPENAI_BASE_URL:
    check_address("OPENAI_BASE_URL", OPENAI_BASE_URL, {"http", "https"})
# "offline" (the deterministic model in the repo), "openai:<model name>", or a
# dotted path to a class implementing agents.llm.ChatModel.
AGENT_MODEL = os.environ.get("AGENT_MODEL", "offline")

# --- Auth, i18n, static ---------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = embedded.VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
# Files are found where they live (no collectstatic step needed to run).
WHITENOISE_USE_FINDERS = True

# --- Customers' attachments (tickets.attachments) -------------------------------------------
# Stored through Django's storage API: files under MEDIA_ROOT by default, or any storage class
# (django-storages' S3 for one) named by MEDIA_STORAGE_BACKEND, with its options as a JSON object
# in MEDIA_STORAGE_OPTIONS. Never served as public files: a view checks who asks first.
MEDIA_ROOT = Path(os.environ.get("MEDIA_ROOT") or embedded.VAR_DIR / "media")
MEDIA_URL = "media/"
try:
    _media_options = json.loads(os.environ.get("MEDIA_STORAGE_OPTIONS") or "{}")
except ValueError as exc:
    raise ImproperlyConfigured(f"MEDIA_STORAGE_OPTIONS is not a JSON object: {exc}") from None
if not isinstance(_media_options, dict):
    raise ImproperlyConfigured('MEDIA_STORAGE_OPTIONS must be a JSON object, e.g. {"bucket_name": "support"}')
STORAGES = {
    "default": {
        "BACKEND": os.environ.get("MEDIA_STORAGE_BACKEND") or "django.core.files.storage.FileSystemStorage",
        "OPTIONS": _media_options,
    },
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# One file at most this large; at most this many files on one message; images at most this many
# pixels (a small file can unpack into a huge image).
ATTACHMENT_MAX_BYTES = env_int("ATTACHMENT_MAX_BYTES", 10 * 1024 * 1024, minimum=1)
ATTACHMENT_MAX_FILES = env_int("ATTACHMENT_MAX_FILES", 5, minimum=1)
ATTACHMENT_MAX_PIXELS = env_int("ATTACHMENT_MAX_PIXELS", 40_000_000, minimum=1)
# What the web server reads of one request body before it answers 413 (support/server.py), so a
# huge body is never kept: by default a message with every file it may carry, its text fields and
# room for the form's own framing.
WEB_MAX_REQUEST_BYTES = env_int(
    "WEB_MAX_REQUEST_BYTES", ATTACHMENT_MAX_BYTES * ATTACHMENT_MAX_FILES + 2_621_440 + 65_536, minimum=1024
)
# One WebSocket message (and frame) at most this large; past it the socket is closed with 1009. A
# page sends a few hundred bytes; the chat answers a frame past 16,000 characters with an error frame.
WEBSOCKET_MAX_MESSAGE_BYTES = env_int("WEBSOCKET_MAX_MESSAGE_BYTES", 65_536, minimum=1024)

# The console backend prints mail, password-reset links included, to the log: only when DEBUG is on.
EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend" if DEBUG else "django.core.mail.backends.smtp.EmailBackend",
)
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1, maximum=65535)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
# Seconds a mail server may leave a connection, or one reply, waiting: without it Django's SMTP
# backend waits forever, and a worker sending the agent's email holds its ticket (the heartbeat
# keeps the lease) as long as the server stays silent.
EMAIL_TIMEOUT = env_seconds("EMAIL_TIMEOUT", 10.0)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "support@example.com")
EMAIL_FILE_PATH = env_str("EMAIL_FILE_PATH", str(embedded.VAR_DIR / "mail"))

LOG_LEVEL = env_str("LOG_LEVEL", "INFO").upper()
if LOG_LEVEL not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
    raise ImproperlyConfigured(f"LOG_LEVEL={LOG_LEVEL!r} is not a level; use DEBUG, INFO, WARNING, ERROR or CRITICAL")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}

# --- Payments (the official stripe SDK; the local sandbox by default) ----------------------
STRIPE_API_KEY = os.environ.get("STRIPE_API_KEY", "sk_test_sandbox")
STRIPE_API_BASE = check_address(
    "STRIPE_API_BASE", os.environ.get("STRIPE_API_BASE") or "http://127.0.0.1:12111", {"http", "https"}
)
PAYMENTS_TIMEOUT_SECONDS = env_seconds("PAYMENTS_TIMEOUT_SECONDS", 10.0)
# Refunds left submitted/uncertain are settled from the provider's records this often.
REFUND_RECONCILE_SECONDS = env_int("REFUND_RECONCILE_SECONDS", 60, minimum=1, maximum=MAX_INTERVAL_SECONDS)
# A round holding the reconciler's lock on a session idle this long (far longer than a provider call,
# PAYMENTS_TIMEOUT_SECONDS, or a statement takes) is one whose worker is frozen: the next round goes on.
REFUND_RECONCILE_STALLED_SECONDS = env_int(
    "REFUND_RECONCILE_STALLED_SECONDS", 120, minimum=1, maximum=int(MAX_TIMEOUT_SECONDS)
)
# One execution of a refund tries the provider this many times under the same key, waiting
# an exponential, jittered backoff between tries (from the first wait up to the longest)
# and asking the provider what happened under the key before each retry.
REFUND_PROVIDER_ATTEMPTS = env_int("REFUND_PROVIDER_ATTEMPTS", 4, minimum=1, maximum=100)
REFUND_RETRY_FIRST_WAIT_MS = env_int("REFUND_RETRY_FIRST_WAIT_MS", 500)
REFUND_RETRY_MAX_WAIT_MS = env_int("REFUND_RETRY_MAX_WAIT_MS", 8000)
# A refund the provider has no record of, this long after it was submitted, is failed
# (the customer is told and a person takes the ticket), unless a worker still holds its ticket.
REFUND_UNCERTAIN_AFTER_SECONDS = env_int("REFUND_UNCERTAIN_AFTER_SECONDS", 120, minimum=1)
# A refund failed without the provider ever showing it is asked about again this long (Stripe keeps
# idempotency keys for 24 hours): if it shows up paid after all, the ledger records it.
# At most a year: the refund checks subtract it from the database's clock, and far past it PostgreSQL
# answers "timestamp out of range" to every one (no refund could be made).
REFUND_RECHECK_FAILED_MAX_HOURS = 366 * 24
REFUND_RECHECK_FAILED_HOURS = env_int("REFUND_RECHECK_FAILED_HOURS", 24, maximum=REFUND_RECHECK_FAILED_MAX_HOURS)

# --- The agent loop ---------------------------------------------------------------------
AGENT_LEASE_SECONDS = env_int("AGENT_LEASE_SECONDS", 60, minimum=2, maximum=86_400)
# Past the task's time limit a pass's heartbeat stops renewing its lease (agents.lease.held_at_most): a
# pass that never ends keeps its ticket for one more lease at most, so a lease longer than the limit
# kept it longer than the limit promises (and one past what a timestamp holds failed every pass).
if AGENT_LEASE_SECONDS > CELERY_TASK_TIME_LIMIT:
    raise ImproperlyConfigured(
        f"AGENT_LEASE_SECONDS={AGENT_LEASE_SECONDS} must be at most CELERY_TASK_TIME_LIMIT={CELERY_TASK_TIME_LIMIT}: "
        "past the time limit a pass's heartbeat stops renewing its lease, and another worker takes the ticket "
        "over once the lease runs out"
    )
AGENT_MAX_STEPS = env_int("AGENT_MAX_STEPS", 16, minimum=2)
AGENT_TOKEN_BUDGET = env_int("AGENT_TOKEN_BUDGET", 200_000, minimum=1)
# Failures in a row (bad model output, a model outage, a tool or database error) before the
# ticket is parked with a person; each is retried after an exponential, jittered backoff.
AGENT_MAX_CONSECUTIVE_FAILURES = env_int(
    "AGENT_MAX_CONSECUTIVE_FAILURES", env_int("AGENT_MODEL_ATTEMPTS", 3, minimum=1), minimum=1
)
# A failure that is an outage of something the agent depends on (the model endpoint unreachable,
# timing out or answering 5xx/429; the database's connection lost) is not the ticket's: it is tried
# again with a backoff (exponential, jittered, at most AGENT_OUTAGE_RETRY_MAX_SECONDS) for this long
# from the first failure of the outage, without counting against AGENT_MAX_CONSECUTIVE_FAILURES;
# past it the ticket is parked with a person. 0: an outage counts as any failure.
AGENT_OUTAGE_PATIENCE_SECONDS = env_int("AGENT_OUTAGE_PATIENCE_SECONDS", 900)
# At most a day: the wait is a Celery countdown, and far past a day one cannot be held (an overflow, or a
# ticket put off for years at the first outage instead of tried again within the patience above).
AGENT_OUTAGE_RETRY_MAX_SECONDS = env_int(
    "AGENT_OUTAGE_RETRY_MAX_SECONDS", 30, minimum=1, maximum=int(MAX_TIMEOUT_SECONDS)
)
# The longest one tool call may run (its handler, or a reconcile hook asking what happened under its
# key): past it the call is given up by its replay policy (agents.tool_thread) and the pass's failure
# counted, instead of holding the worker and the ticket until Celery's soft time limit.
AGENT_TOOL_TIMEOUT_SECONDS = env_seconds("AGENT_TOOL_TIMEOUT_SECONDS", 120.0)


def refund_tries_seconds() -> float:
    """The longest a refund's call waits on a payment provider that accepts and never answers: the
    payment's refunds read, then the refund sent, each with all its tries (REFUND_PROVIDER_ATTEMPTS,
    PAYMENTS_TIMEOUT_SECONDS each) and the backoff between them (jittered, capped: agents.refunds)."""
    first = max(0, REFUND_RETRY_FIRST_WAIT_MS) / 1000
    cap = max(first, REFUND_RETRY_MAX_WAIT_MS / 1000)
    waits = sum(min(first * 2**n + first, cap) for n in range(REFUND_PROVIDER_ATTEMPTS - 1))
    return 2 * (REFUND_PROVIDER_ATTEMPTS * PAYMENTS_TIMEOUT_SECONDS + waits)


# A provider that does not answer is an outage, waited out for AGENT_OUTAGE_PATIENCE_SECONDS: cut
# short by the tool call's bound, it would be counted as the ticket's failure and parked after a few.
if AGENT_TOOL_TIMEOUT_SECONDS <= refund_tries_seconds():
    raise ImproperlyConfigured(
        f"AGENT_TOOL_TIMEOUT_SECONDS={AGENT_TOOL_TIMEOUT_SECONDS:g} must be above a refund's tries at a payment "
        f"provider that does not answer ({refund_tries_seconds():g} s: REFUND_PROVIDER_ATTEMPTS x "
        "PAYMENTS_TIMEOUT_SECONDS and the backoff between them, for the payment's refunds and the refund)"
    )
# What the agent accepts from a model in one step (agents.llm.validate_response).
AGENT_MAX_REPLY_CHARS = env_int("AGENT_MAX_REPLY_CHARS", 16000, minimum=1)
# The model writes its reasoning into the text with no opening tag, only "</think>" at its end (a chat
# template that opens <think> in the prompt, as DeepSeek-R1's distilled models', or a server that strips
# it): its text is held back until it is known not to be reasoning, and its answers reach the page whole
# rather than word by word. Off, every answer streams as it is written, and such reasoning shows on the
# page until its closing tag (the reply posted and stored leaves it out).
AGENT_MODEL_REASONING_UNOPENED = env_bool("AGENT_MODEL_REASONING_UNOPENED", False)
AGENT_MAX_TOOL_CALLS_PER_STEP = env_int("AGENT_MAX_TOOL_CALLS_PER_STEP", 16, minimum=1)
AGENT_MAX_TOOL_ARGUMENT_CHARS = env_int("AGENT_MAX_TOOL_ARGUMENT_CHARS", 16000, minimum=1)
# Counted as the answer streams (agents.llm.StreamMeter): a stream past a limit is stopped there,
# and one still going after this many seconds too (a chunk every 59 s never trips a 60 s read timeout).
AGENT_MODEL_STEP_SECONDS = env_int("AGENT_MODEL_STEP_SECONDS", 300, minimum=1, maximum=int(MAX_TIMEOUT_SECONDS))
# Sent to an OpenAI-compatible endpoint as max_tokens when set (0: none sent; the limits above
# stop the stream either way). Off by default: reasoning models refuse max_tokens, and a small
# context window refuses a prompt plus max_tokens that do not fit.
AGENT_MAX_OUTPUT_TOKENS = env_int("AGENT_MAX_OUTPUT_TOKENS", 0)
# Replaces the built-in system prompt (agents.conversation.DEFAULT_SYSTEM_PROMPT) when set.
AGENT_SYSTEM_PROMPT = os.environ.get("AGENT_SYSTEM_PROMPT", "")
OFFLINE_MODEL_TOKEN_DELAY_MS = env_int("OFFLINE_MODEL_TOKEN_DELAY_MS", 0, maximum=60_000)
# Short: the sweeper is also how a dead lease owner is noticed (its advisory lock is gone).
AGENT_SWEEP_SECONDS = env_int("AGENT_SWEEP_SECONDS", 3, minimum=1, maximum=MAX_INTERVAL_SECONDS)

# Before a refund is paid (after any staff approval) the customer confirms the amount with a
# button in the chat (agents.confirmation). The admin's approval policy can turn it off too.
REFUND_CUSTOMER_CONFIRMATION = env_bool("REFUND_CUSTOMER_CONFIRMATION", True)
# The currency of the approval policy's amounts (its threshold and customer limit, in that
# currency's minor unit). A refund on an order in any other currency is reviewed by staff: amounts
# in two currencies are never compared. Each agent profile version names its own ("currency" in its
# approval policy), and its runs read that one: this is the currency of a version made naming none
# (the first one among them). Changed here, it changes no version made before: a run paused across
# the redeploy keeps the currency its thresholds were set in.
APPROVAL_POLICY_CURRENCY = env_str("APPROVAL_POLICY_CURRENCY", "usd").lower()
if not re.fullmatch(r"[a-z]{3}", APPROVAL_POLICY_CURRENCY):
    raise ImproperlyConfigured(
        f"APPROVAL_POLICY_CURRENCY must be a three-letter ISO currency code such as usd or eur; "
        f"got {APPROVAL_POLICY_CURRENCY!r}"
    )

# --- Staff pages -------------------------------------------------------------------------
# Approving more than this (in the currency's minor unit) asks the approver to confirm the
# amount once more on the dashboard.
APPROVAL_CONFIRM_ABOVE_CENTS = env_int("APPROVAL_CONFIRM_ABOVE_CENTS", 50_000)
# Times in the admin and on staff pages to the second (support/formats).
FORMAT_MODULE_PATH = ["support.formats"]

# Each round's interval is at least a second (at 0 s beat sends the round without pause, and the queue
# fills with it ahead of every customer's doorbell) and at most MAX_INTERVAL_SECONDS.
CELERY_BEAT_SCHEDULE = {
    "agents.sweep": {"task": "agents.sweep", "schedule": float(AGENT_SWEEP_SECONDS)},
    "agents.reconcile_refunds": {"task": "agents.reconcile_refunds", "schedule": float(REFUND_RECONCILE_SECONDS)},
    "approvals.expire_due": {
        "task": "approvals.expire_due",
        "schedule": float(env_int("APPROVAL_EXPIRY_SECONDS", 60, minimum=1, maximum=MAX_INTERVAL_SECONDS)),
    },
    # Refunds the customer did not confirm in time are not paid, and the customer is told.
    "agents.expire_confirmations": {
        "task": "agents.expire_confirmations",
        "schedule": float(env_int("AGENT_CONFIRMATION_EXPIRY_SECONDS", 30, minimum=1, maximum=MAX_INTERVAL_SECONDS)),
    },
}


# --- HTTPS, cookies, content security policy (check --deploy clean in production) ------------
# On by default when DEBUG is off; each can be turned off for a plain-HTTP setup (say, behind a
# proxy that redirects itself) by its variable.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
# A load balancer's health check may come over plain HTTP.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
# Behind a TLS-terminating proxy: SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO,https
_proxy_header = env_list("SECURE_PROXY_SSL_HEADER", [])
if _proxy_header:
    if len(_proxy_header) != 2:
        raise ImproperlyConfigured("SECURE_PROXY_SSL_HEADER must be HEADER,VALUE, e.g. HTTP_X_FORWARDED_PROTO,https")
    if not re.fullmatch(r"HTTP_[A-Z0-9_]+", _proxy_header[0]):
        # Django looks the header up in request.META: named as on the wire it never matches, every
        # request looks like plain HTTP, and SECURE_SSL_REDIRECT redirects forever.
        raise ImproperlyConfigured(
            f"SECURE_PROXY_SSL_HEADER={','.join(_proxy_header)!r}: name the header as Django reads it, "
            "HTTP_ and the name in capitals with _ for -: HTTP_X_FORWARDED_PROTO,https"
        )
    SECURE_PROXY_SSL_HEADER = (_proxy_header[0], _proxy_header[1])
SESSION_COOKIE_HTTPONLY = True
# Django's database sessions, with cookies that hold what no key can (a NUL) read as no session.
SESSION_ENGINE = "support.sessions"
X_FRAME_OPTIONS = "DENY"

# django-csp: scripts, styles and connections from our own origin only (the pages have no inline
# script); WebSockets to the same host are 'self' in CSP level 3, listed for older browsers.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        # The admin sets a few inline style attributes.
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'", "ws:", "wss:"] if DEBUG else ["'self'", "wss:"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# --- Logins and volume ------------------------------------------------------------------------
# django-axes: after AXES_FAILURE_LIMIT failed logins for one username from one address, that
# pair is locked out for AXES_COOLOFF_MINUTES (customers, staff and the admin alike).
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5, minimum=1)
# At least a minute: at 0 django-axes counts only the failures of this instant and never locks anyone
# out. At most a year: far past it every sign-in failed (django-axes subtracts it from now).
AXES_COOLOFF_MAX_MINUTES = 366 * 24 * 60
AXES_COOLOFF_TIME = timedelta(minutes=env_int("AXES_COOLOFF_MINUTES", 15, minimum=1, maximum=AXES_COOLOFF_MAX_MINUTES))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_HTTP_RESPONSE_CODE = 429
AXES_VERBOSE = False
# Behind TRUSTED_PROXY_COUNT reverse proxies every request comes from the nearest one: the client's
# address is read from X-Forwarded-For (support.client_ip), for the lockout and the per-address
# limits alike, or they would be one for the whole site.
TRUSTED_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 0, maximum=10)
AXES_CLIENT_IP_CALLABLE = "support.client_ip.client_ip"
# django-axes' database handler, whose releases also release the limits per address and per account
# (support/login_limits.py).
AXES_HANDLER = "support.login_limits.LockoutHandler"
RATELIMIT_IP_META_KEY = "support.client_ip.client_ip"
# Per-customer limits (django-ratelimit rates, e.g. "8/10s", "20/h"): over them, 429 and Retry-After.
CUSTOMER_MESSAGE_RATE = env_rate("CUSTOMER_MESSAGE_RATE", "8/10s")
CUSTOMER_TICKET_RATE = env_rate("CUSTOMER_TICKET_RATE", "10/h")
# Password-reset requests, per address asked for and per client address.
# Failed sign-ins from one address (any accounts) and on one account (from any addresses), beside
# django-axes' AXES_FAILURE_LIMIT for one username from one address: past either, sign-ins from that
# address or to that account are refused (429) until the window ends.
LOGIN_FAILURE_RATE_PER_ADDRESS = env_rate("LOGIN_FAILURE_RATE_PER_ADDRESS", "30/h")
LOGIN_FAILURE_RATE_PER_ACCOUNT = env_rate("LOGIN_FAILURE_RATE_PER_ACCOUNT", "30/h")
PASSWORD_RESET_RATE_PER_EMAIL = env_rate("PASSWORD_RESET_RATE_PER_EMAIL", "3/h")
PASSWORD_RESET_RATE_PER_IP = env_rate("PASSWORD_RESET_RATE_PER_IP", "10/h")
RATELIMIT_USE_CACHE = "default"
