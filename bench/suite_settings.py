"""Settings of ``make bench`` (``python -m bench``) and of the processes it starts.

The product's own settings, on a scratch database of the server DATABASE_URL names,
with a Celery queue, a Channels prefix and a streaming-buffer prefix of their own, so
that workers, beat or browsers of another stack on the same Redis never see them.

``BENCH_QUEUE`` picks the queue: the web, worker and beat processes the benchmark
starts share ``bench-suite``; the benchmark process itself publishes its own
doorbells to a list nobody consumes (tickets it opens in-process and advances itself
must not also be advanced by a worker), and rings the workers explicitly when it
means to.
"""

from __future__ import annotations

import os

from support.settings import *  # noqa: F403
from support.settings import CHANNEL_LAYERS, DATABASES

BENCH_NAME = "bench-suite"
WORKER_QUEUE = BENCH_NAME
# The database DATABASE_URL names: only used to create and drop the scratch ones.
BENCH_ADMIN_DATABASE = DATABASES["default"]["NAME"]
DATABASES["default"]["NAME"] = os.environ.get("BENCH_DATABASE", "bench_suite")
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("BENCH_QUEUE", WORKER_QUEUE)
CHANNELS_PREFIX = BENCH_NAME  # read by tickets.realtime for the streaming buffer's keys
CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = BENCH_NAME
