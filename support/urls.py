from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from support import views
from support.forms import AdminLoginForm, LoginForm

handler500 = "support.views.server_error"

admin.site.site_header = "Support operations"
admin.site.site_title = "Support operations"
admin.site.login_form = AdminLoginForm

urlpatterns = [
    path("healthz", views.health, name="health"),
    path("admin/", admin.site.urls),
    path("accounts/password_reset/", views.ThrottledPasswordResetView.as_view(), name="password_reset"),
    path("accounts/login/", auth_views.LoginView.as_view(authentication_form=LoginForm), name="login"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("staff/approvals/", include("approvals.urls")),
    path("staff/", include("staff.urls")),
    path("", include("agents.urls")),
    path("", include("tickets.urls")),
]
