"""The admin site: Django's, with every bulk action's selection checked before it reaches a query."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.apps import AdminConfig
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.urls import reverse

from support.startup import check_class_paths, check_media_folder


def is_value_of(field: Any, value: Any) -> bool:
    """Could ``value``, as a browser sent it, be stored in ``field`` (a primary key: a number, in range)?"""
    try:
        field.run_validators(field.to_python(value))
    except ValidationError:
        return False
    return True


class SupportAdminSite(admin.AdminSite):
    """A bulk action's selection that is not ids of the list's objects (a garbled or hand-made
    request) is a 400: it went into the action's query as it came, a 500. Every model's list, the
    product's and Django's own (users, groups, lockouts) alike."""

    def admin_view(self, view: Callable[..., HttpResponse], cacheable: bool = False) -> Callable[..., HttpResponse]:
        model_admin = getattr(view, "__self__", None)
        # Compared as a bound method, not by name: a list whose page is a function of its own (the runs'
        # list, agents.admin) is the changelist all the same.
        if isinstance(model_admin, admin.ModelAdmin) and view == model_admin.changelist_view:
            view = _selection_checked(view, model_admin)
        return super().admin_view(view, cacheable)

    def password_change(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """Django's, whose current password counts as a sign-in attempt (django-axes), as on the sign-in
        page: guessed there, it was checked without limit."""
        # Imported here: this module is loaded with INSTALLED_APPS, before the auth forms' models can be.
        from support.forms import AdminThrottledPasswordChangeForm
        from support.views import ThrottledPasswordChangeView

        defaults: dict[str, Any] = {
            "form_class": AdminThrottledPasswordChangeForm,
            "success_url": reverse("admin:password_change_done", current_app=self.name),
            "extra_context": {**self.each_context(request), **(extra_context or {})},
        }
        if self.password_change_template is not None:
            defaults["template_name"] = self.password_change_template
        request.current_app = self.name
        return ThrottledPasswordChangeView.as_view(**defaults)(request)


def _selection_checked(view: Callable[..., HttpResponse], model_admin: admin.ModelAdmin) -> Callable[..., HttpResponse]:
    @wraps(view)
    def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method == "POST":
            pk = model_admin.model._meta.pk
            if not all(is_value_of(pk, value) for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)):
                return HttpResponseBadRequest("The selection is not ids of these objects; nothing was done.")
        return view(request, *args, **kwargs)

    return checked


class SupportAdminConfig(AdminConfig):
    default_site = "support.admin_site.SupportAdminSite"

    def ready(self) -> None:
        super().ready()  # every app's admin registered
        _lockout_cleanup_reads_its_time()
        # The project's one app of its own: the configuration checks that import classes run here.
        check_class_paths()
        check_media_folder()


def _lockout_cleanup_reads_its_time() -> None:
    """django-axes' "Clean up expired attempts" on the lockout list reads the attempt's time from the
    request, which only a sign-in sets (``AxesProxyHandler.update_request``): every use of it was a 500.
    The action sets it first, as a sign-in would."""
    from axes.admin import AccessAttemptAdmin
    from axes.handlers.proxy import AxesProxyHandler
    from axes.models import AccessAttempt

    site = admin.site
    registered = site._registry.get(AccessAttempt)
    if not isinstance(registered, AccessAttemptAdmin):
        return  # axes' admin is off (AXES_ENABLE_ADMIN) or replaced

    class LockoutAdmin(type(registered)):  # type: ignore[misc, valid-type]
        @admin.action(description=AccessAttemptAdmin.cleanup_expired_attempts.short_description)
        def cleanup_expired_attempts(self, request: HttpRequest, queryset: Any) -> None:
            AxesProxyHandler.update_request(request)
            super().cleanup_expired_attempts(request, queryset)

    site.unregister(AccessAttempt)
    site.register(AccessAttempt, LockoutAdmin)
