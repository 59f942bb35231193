"""Input the database cannot store is refused at the door with a clear 400, before any view
writes half of it: NUL characters, lone surrogates, JSON nested beyond reason or naming a key
twice, a form or a query whose bytes are not UTF-8; and a body past
DATA_UPLOAD_MAX_MEMORY_SIZE with a 413 that says so. And pages of a browser holding a session are
not kept in its cache (``SignedInPagesNotStored``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import unquote_to_bytes

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.utils.cache import add_never_cache_headers

from support.multipart import FormNotUtf8, StrictUtf8Form
from support.storable import KeyTwice, each_key_once, unstorable

FORM_TYPES = {"application/x-www-form-urlencoded", "multipart/form-data"}


_NOT_UTF8 = "has bytes that are not UTF-8"


def _utf8(encoded: str | bytes) -> bool:
    """Are a query's or a form's bytes, percent-escapes decoded, UTF-8? Django reads any others as
    U+FFFD (or a form's raw bytes as Latin-1): the words stored would not be the words sent."""
    try:
        unquote_to_bytes(encoded).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class SignedInPagesNotStored:
    """What is answered to a browser holding a session (a signed-in person's, as far as can be told
    without the database) says ``Cache-Control: no-store``, unless its view said otherwise: on a
    shared computer, Back after signing out fetches the page again (the sign-in page) instead of
    showing the chat from the browser's cache. Decided from the session's key the cookie brought,
    never from ``request.user``: that reads the session and the user from the database on the way
    out of every response, the 503 of a web server that cannot reach it included."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        session = getattr(request, "session", None)
        # The key is the cookie's (or the one a sign-in just gave); reading it loads nothing.
        if "Cache-Control" not in response and session is not None and session.session_key:
            add_never_cache_headers(response)
        return response


class RejectUnstorableInput:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            refusal = self._refusal(request)
        except RequestDataTooBig:
            # Django's own answer is a bare "Bad Request (400)" page, even to a JSON client.
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            refusal = self._answer(
                self._wants_json(request),
                f"The request is larger than {limit} bytes; nothing was saved. Send less at once.",
                status=413,
            )
        if refusal is not None:
            return refusal
        return self.get_response(request)

    @staticmethod
    def _wants_json(request: HttpRequest) -> bool:
        return "json" in (request.content_type or "") or "json" in request.headers.get("Accept", "")

    def _refusal(self, request: HttpRequest) -> HttpResponse | None:
        wants_json = self._wants_json(request)
        where, reason = "", None
        reason = unstorable(request.path)
        if reason:
            where = "The address"
        if not reason and not _utf8(request.META.get("QUERY_STRING", "")):
            reason, where = _NOT_UTF8, "The address's query"
        if not reason:
            for key, values in request.GET.lists():
                reason = unstorable([key, *values])
                if reason:
                    where = f"The parameter {key[:40]!r}" if not unstorable(key) else "A parameter"
                    break
        if not reason and request.method in {"POST", "PUT", "PATCH"}:
            if request.content_type not in FORM_TYPES:
                # JSON, or a body labelled otherwise (text/plain is what a fetch with a string body
                # sends): the views read JSON whatever the label says, so it is checked the same.
                try:
                    data = json.loads(request.body or b"null", object_pairs_hook=each_key_once)
                except KeyTwice as twice:
                    reason, where = f"names {str(twice)[:40]!r} twice", "The request body"
                except RecursionError:
                    reason, where = "is nested too deeply", "The request body"
                except (ValueError, UnicodeDecodeError):
                    data = None  # not JSON: the view answers that itself
                else:
                    reason = unstorable(data)
                    where = "The request body"
            else:
                if request.content_type == "application/x-www-form-urlencoded" and not _utf8(request.body):
                    return self._answer(wants_json, f"The form {_NOT_UTF8}; nothing was saved. Send it as UTF-8.")
                if request.content_type == "multipart/form-data":
                    request.upload_handlers.insert(0, StrictUtf8Form(request))
                try:
                    fields = list(request.POST.lists())
                except FormNotUtf8:
                    return self._answer(wants_json, f"The form {_NOT_UTF8}; nothing was saved. Send it as UTF-8.")
                except MultiPartParserError:
                    return self._answer(wants_json, "The form could not be read.")
                except TooManyFilesSent:  # past what Django parses at all (DATA_UPLOAD_MAX_NUMBER_FILES)
                    return self._answer(wants_json, "Too many files in one request; nothing was saved.")
                except TooManyFieldsSent:
                    return self._answer(wants_json, "Too many fields in one request; nothing was saved.")
                for key, values in fields:
                    reason = unstorable([key, *values])
                    if reason:
                        where = f"The field {key[:40]!r}" if not unstorable(key) else "A field"
                        break
        if reason:
            return self._answer(wants_json, f"{where} {reason}; nothing was saved. Please remove it and try again.")
        return None

    @staticmethod
    def _answer(wants_json: bool, message: str, status: int = 400) -> HttpResponse:
        if wants_json:
            return JsonResponse({"error": message}, status=status)
        return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")
