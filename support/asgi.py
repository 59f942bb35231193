"""ASGI entry point: HTTP through Django, WebSockets through Channels."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "support.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs the app registry)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from support.routing import websocket_urlpatterns  # noqa: E402
from support.websocket import StrictOriginValidator  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # Exact origins (scheme, host and port), not only allowed host names.
        "websocket": StrictOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
