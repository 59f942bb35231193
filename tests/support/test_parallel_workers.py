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
