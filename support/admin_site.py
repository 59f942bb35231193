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
        if isinstance(model_admin, admin.ModelAdmin) and view.__name__ == "changelist_view":
            view = _selection_checked(view, model_admin)
        return super().admin_view(view, cacheable)


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
