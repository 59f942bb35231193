"""The suite's parallel workers each have a Redis database and a live-update prefix of their own."""

from __future__ import annotations

import pytest
from django.conf import settings

from tests import parallel


def test_each_worker_takes_the_redis_database_after_the_given_one_plus_its_number():
    assert parallel.redis_url_of_worker("redis://127.0.0.1:6379/0", 0) == "redis://127.0.0.1:6379/1"
    assert parallel.redis_url_of_worker("redis://127.0.0.1:6379/5", 2) == "redis://127.0.0.1:6379/8"
    assert parallel.redis_url_of_worker("redis://:secret@cache:6380", 1) == "redis://:secret@cache:6380/2"
    assert parallel.redis_url_of_worker("rediss://cache:6380/14", 1) == "rediss://cache:6380/0"


def test_this_worker_reads_its_own_redis_database_and_prefix():
    index = parallel.worker_index()
    if index is None:
        pytest.skip("the suite runs in one process (TEST_WORKERS=0): nothing is shared")
    assert settings.CHANNELS_PREFIX.endswith(f"-gw{index}")
    assert settings.CACHES["default"]["KEY_PREFIX"].endswith(f"-gw{index}")
    assert settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]["address"] == settings.REDIS_URL
    assert settings.CELERY_BROKER_URL == settings.REDIS_URL


GROUPED_MODULE = """
import os

import pytest


@pytest.fixture(scope="module")
def servers():
    return "started once for the module"


@pytest.mark.parametrize("n", range(4))
def test_with_the_modules_servers(servers, n, tmp_path_factory):
    with open(os.environ["RAN_ON"], "a") as f:
        f.write(f"module {os.environ['PYTEST_XDIST_WORKER']}\\n")


@pytest.mark.xdist_group("hosts")
@pytest.mark.parametrize("n", range(4))
def test_in_a_named_group(n):
    with open(os.environ["RAN_ON"], "a") as f:
        f.write(f"named {os.environ['PYTEST_XDIST_WORKER']}\\n")
"""


def test_the_tests_of_a_group_or_of_a_module_fixture_run_on_one_worker(tmp_path):
    """``--dist loadgroup`` hands a group out whole: else each worker that gets one of a browser
    module's tests starts its servers and Chromium, and the many-hosts tests build networks side
    by side."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "test_grouped.py").write_text(GROUPED_MODULE)
    ran_on = tmp_path / "ran_on.txt"
    root = Path(parallel.__file__).resolve().parents[1]
    env = {**os.environ, "RAN_ON": str(ran_on), "PYTHONPATH": str(root)}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("TEST_RUN_ID", None)
    plugins = ["-p", "no:django", "-p", "no:cacheprovider", "-p", "tests.parallel"]
    argv = [
        sys.executable,
        "-m",
        "pytest",
        *plugins,
        "-n",
        "2",
        "--dist=loadgroup",
        "-q",
        "--rootdir",
        str(tmp_path),
        "--basetemp",
        str(tmp_path / "inner-tmp"),  # not /tmp/pytest-of-<user>, which a new session makes private again
    ]
    argv.append(str(tmp_path / "test_grouped.py"))
    run = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    lines = ran_on.read_text().split()
    pairs = list(zip(lines[::2], lines[1::2], strict=True))
    workers = {kind: {worker for k, worker in pairs if k == kind} for kind in ("module", "named")}
    assert len(lines) == 16, lines
    assert len(workers["module"]) == 1, f"one module's tests ran on {sorted(workers['module'])}"
    assert len(workers["named"]) == 1, f"one group's tests ran on {sorted(workers['named'])}"
