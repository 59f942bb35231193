"""Settings of ``make drill`` and of the processes it starts.

The product's own settings on a scratch database (``DRILL_DATABASE``, default
``drill_run``) of the server DATABASE_URL names, with a Celery queue, a Channels
prefix and a streaming-buffer prefix of their own, so nothing of another stack on
the same Redis is touched.
"""

from __future__ import annotations

import os

from support.settings import *  # noqa: F403
from support.settings import CHANNEL_LAYERS, DATABASES

DRILL_NAME = "support-drill"
# The database DATABASE_URL names: only used to create and drop the scratch one.
DRILL_ADMIN_DATABASE = DATABASES["default"]["NAME"]
DATABASES["default"]["NAME"] = os.environ.get("DRILL_DATABASE", "drill_run")
CELERY_TASK_DEFAULT_QUEUE = DRILL_NAME
CHANNELS_PREFIX = DRILL_NAME
CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = DRILL_NAME
