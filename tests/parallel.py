"""Keeps the suite's parallel workers (pytest-xdist, ``make test``) out of each other's way.

Loaded with ``-p tests.parallel`` (pyproject's addopts), before pytest-django reads the
settings. Each xdist worker already gets a database of its own (pytest-django adds the worker's
id to the test database's name); here it also gets a Redis database of its own, which holds the
Celery queues, the cache and the streamed-answer buffers, and a Channels prefix of its own: Redis
Pub/Sub channels are shared by every database of a server, so live updates of one worker's
tickets would otherwise reach the other's sockets. Processes the tests start (Celery workers, the
web server) inherit these through the environment.

Every run, with workers or without, also gets prefixes of its own (``_isolate_runs``).
"""

from __future__ import annotations

import os
import secrets
from urllib.parse import urlparse, urlunparse

import pytest

REDIS_DATABASES = 16  # a Redis server's default number of databases


def worker_index() -> int | None:
    """The xdist worker's number (gw0 -> 0), or None outside a worker."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None


def redis_url_of_worker(url: str, index: int) -> str:
    """The same Redis server, the database after the given one's plus the worker's number."""
    parts = urlparse(url)
    path = parts.path.strip("/")
    base = int(path) if path.isdigit() else 0
    return urlunparse(parts._replace(path=f"/{(base + 1 + index) % REDIS_DATABASES}"))


def _isolate_runs() -> None:
    """Each run of the suite gets prefixes of its own (the workers inherit the run's): the test
    database is made afresh each run, so ticket ids start again at 1, while what an earlier run
    left in Redis under those ids lasts up to an hour (a person's "stream closed" mark of ticket 3
    would silence the answer of this run's ticket 3)."""
    if "TEST_RUN_ID" in os.environ:
        return
    run = os.environ["TEST_RUN_ID"] = secrets.token_hex(3)
    os.environ["CHANNELS_PREFIX"] = f"{os.environ.get('CHANNELS_PREFIX', 'asgi')}-{run}"
    os.environ["CACHE_PREFIX"] = f"{os.environ.get('CACHE_PREFIX', 'support')}-{run}"


def _isolate() -> None:
    index = worker_index()
    if index is None:
        return
    if index + 1 >= REDIS_DATABASES:
        raise RuntimeError(f"at most {REDIS_DATABASES - 1} test workers share one Redis server")
    from support import embedded  # no Django here: the settings are not read yet

    url = os.environ.get("REDIS_URL") or embedded.redis_running_url()
    if url:
        os.environ["REDIS_URL"] = redis_url_of_worker(url, index)
    # The same prefix for the live updates' Pub/Sub channels, the cache's keys and the buffers.
    os.environ["CHANNELS_PREFIX"] = f"{os.environ.get('CHANNELS_PREFIX', 'asgi')}-gw{index}"
    os.environ["CACHE_PREFIX"] = f"{os.environ.get('CACHE_PREFIX', 'support')}-gw{index}"


_isolate_runs()
_isolate()

# Tests that share one costly setup, or one machine-wide resource, run on one worker, one after
# another (``--dist loadgroup``): the many-hosts tests share one network of test hosts (package scope).
GROUPS = {"hosts": "hosts"}


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    """Whether the test asks for a fixture made once per module (the browser tests' servers and Chromium)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs and defs[-1].scope == "module" for defs in info.name2fixturedefs.values())


def _long(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(marker) is not None for marker in ("workers", "browser", "hosts"))


def _django_order(item: pytest.Item) -> int:
    """pytest-django's rank of a test: 0 in a rolled-back transaction, 1 committing, 2 no database."""
    mark = item.get_closest_marker("django_db")
    committing = mark is not None and bool(
        mark.kwargs.get("transaction") or mark.kwargs.get("reset_sequences") or (mark.args and mark.args[0])
    )
    fixtures = set(item.fixturenames)
    if committing or fixtures & {"transactional_db", "django_db_reset_sequences", "live_server"}:
        return 1
    return 0 if mark is not None or "db" in fixtures else 2


def _name_the_group_in_the_id(item: pytest.Item) -> None:
    """What pytest-xdist's loadgroup does to a grouped test's id (``<id>@<group>``, which its scheduler
    reads), done here too: since pytest 9.2 keeps the id as a structured ``_id``, xdist's rewrite of the
    old ``_nodeid`` is lost and every group's tests were handed out one by one, to every worker
    (pytest-dev/pytest-xdist#1386). Left alone when xdist did it."""
    groups = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                     for mark in item.iter_markers("xdist_group")})  # fmt: skip
    if not groups or item.nodeid.endswith("@" + "_".join(groups)):
        return
    nodeid = f"{item.nodeid}@{'_'.join(groups)}"
    if hasattr(item, "_id"):
        item._id = type(item._id).parse(nodeid)
    else:
        item._nodeid = nodeid


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Long tests (real workers, browsers, test hosts: up to minutes each) are handed out first: last,
    # they would keep the suite waiting while the other workers idle. Those that leave the test
    # database alone (the drill, the many-hosts tests) before all others; the rest first within
    # pytest-django's order, which is kept: tests in a rolled-back transaction, then those that
    # commit (their teardown empties the tables, and with them the rows the migrations made), then
    # the others. The Makefile keeps it for groups too (--no-loadscope-reorder).
    items.sort(key=lambda item: (not (_long(item) and _django_order(item) == 2), _django_order(item), not _long(item)))
    for item in items:
        for marker, group in GROUPS.items():
            if item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.xdist_group(group))
                break
        else:
            # Otherwise loadgroup hands each test of the module out alone, and every worker that gets
            # one starts the module's servers and browser (about 15 s on a busy host) for its share.
            # Grouped, they start once.
            if _uses_a_module_fixture(item):
                item.add_marker(pytest.mark.xdist_group(f"module:{item.nodeid.split('::', 1)[0]}"))
        if getattr(config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
            _name_the_group_in_the_id(item)
