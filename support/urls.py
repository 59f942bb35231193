from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import urls as auth_urls
from django.contrib.auth import views as auth_views
from django.urls import URLPattern, include, path
from django.views.decorators.http import require_http_methods

from support import views
from support.forms import AdminLoginForm, LoginForm

handler500 = "support.views.server_error"

admin.site.site_header = "Support operations"
admin.site.site_title = "Support operations"
admin.site.login_form = AdminLoginForm

# Django's form views take PUT as POST (with an empty form: 200 and its errors; the reset page counted
# it against the address's limit). The sign-in pages are forms: GET and POST, anything else a 405.
forms_only = require_http_methods(["GET", "HEAD", "POST"])


def _forms_only(pattern: URLPattern) -> URLPattern:
    return path(str(pattern.pattern), forms_only(pattern.callback), name=pattern.name)


urlpatterns = [
    path("healthz", views.health, name="health"),
    path("admin/", admin.site.urls),
    path("accounts/password_reset/", forms_only(views.ThrottledPasswordResetView.as_view()), name="password_reset"),
    path("accounts/login/", forms_only(auth_views.LoginView.as_view(authentication_form=LoginForm)), name="login"),
    # The current password it asks counts as a sign-in attempt (django-axes), as on the sign-in page.
    path(
        "accounts/password_change/",
        forms_only(views.ThrottledPasswordChangeView.as_view()),
        name="password_change",
    ),
    path("accounts/", include([_forms_only(p) for p in auth_urls.urlpatterns])),
    path("staff/approvals/", include("approvals.urls")),
    path("staff/", include("staff.urls")),
    path("", include("agents.urls")),
    path("", include("tickets.urls")),
]
