"""ASGI entry point: HTTP through Django, WebSockets through Channels."""

from __future__ import annotations

import os

from django.conf import settings
from django.core.asgi import get_asgi_application
from django.core.exceptions import ImproperlyConfigured

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "support.settings")
django_asgi_app = get_asgi_application()

# As Django's runserver does: with DEBUG off and no host allowed, every request (the health check's
# too) would be a bare 400. Only the web server needs it; workers and commands answer no requests.
if not settings.DEBUG and not settings.ALLOWED_HOSTS:
    raise ImproperlyConfigured(
        "ALLOWED_HOSTS is not set; with DEBUG off the web server needs the host names it answers, "
        "e.g. ALLOWED_HOSTS=support.example.com"
    )

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
