"""Settings of the processes ``bench.first_token`` starts: the product's own, on a scratch
database, with a Celery queue, a Channels prefix and a streaming-buffer prefix of their
own, so that workers or browsers of another stack on the same Redis never see them."""

from __future__ import annotations

import os

from support.settings import *  # noqa: F403
from support.settings import CHANNEL_LAYERS, DATABASES

BENCH_NAME = "bench-first-token"
# The database DATABASE_URL names: only used to create and drop the scratch one.
BENCH_ADMIN_DATABASE = DATABASES["default"]["NAME"]
DATABASES["default"]["NAME"] = os.environ.get("BENCH_FIRST_TOKEN_DATABASE", "bench_first_token")
CELERY_TASK_DEFAULT_QUEUE = BENCH_NAME
CHANNELS_PREFIX = BENCH_NAME  # read by tickets.realtime for the streaming buffer's keys
CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = BENCH_NAME
