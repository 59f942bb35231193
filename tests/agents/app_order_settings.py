"""The product's settings with "agents" and "approvals" in the order APPROVALS_FIRST asks for."""

from __future__ import annotations

import os

from support.settings import *  # noqa: F403
from support.settings import INSTALLED_APPS as _APPS

_ours = ["agents", "approvals"] if os.environ.get("APPROVALS_FIRST") != "1" else ["approvals", "agents"]
_rest = [app for app in _APPS if app not in {"agents", "approvals"}]
_at = next(i for i, app in enumerate(_APPS) if app in {"agents", "approvals"})
INSTALLED_APPS = [*_rest[:_at], *_ours, *_rest[_at:]]
