"""A multipart form (a photo with its caption) read as strictly as a urlencoded one: every part's
headers and every text field must be UTF-8, or the whole form is refused.

Django reads a multipart text field with ``errors="replace"`` (a Latin-1 caption was stored with
U+FFFD where its letters were, and a client message ID changed, so a retry under the bytes first
sent was another message), and skips a part whose header line is not UTF-8 without a word (a photo
whose file name was Latin-1 vanished from a message stored with a 201)."""

from __future__ import annotations

import codecs
from typing import Any

from django.core.files.uploadhandler import FileUploadHandler
from django.http.multipartparser import MultiPartParser, MultiPartParserError

# Django reads at most this much of a part's headers (multipartparser.parse_boundary_stream).
_PART_HEADER_BYTES = 1024
_STRICT_UTF8 = "support_strict_utf_8"


class FormNotUtf8(MultiPartParserError):
    """A multipart form with bytes that are not UTF-8 in a part's headers or a text field."""


def _strict_utf8_decode(data: Any, errors: str = "strict") -> tuple[str, int]:
    # Whatever ``errors`` the caller asks for (Django asks for "replace"): refused, never replaced.
    return codecs.utf_8_decode(data, "strict", True)


def _find_codec(name: str) -> codecs.CodecInfo | None:
    if name != _STRICT_UTF8:
        return None
    return codecs.CodecInfo(name=_STRICT_UTF8, encode=codecs.utf_8_encode, decode=_strict_utf8_decode)


codecs.register(_find_codec)


class _PartHeadersChecked:
    """The request body as the parser reads it, each part's headers checked on the way: the bytes
    after each ``--boundary`` up to the blank line (or as much as Django reads) must be UTF-8."""

    def __init__(self, stream: Any, boundary: bytes) -> None:
        self._stream = stream
        self._delimiter = b"--" + boundary
        self._pending = b""

    def read(self, size: int = -1) -> bytes:
        chunk = self._stream.read(size)
        self._scan(chunk, at_end=not chunk)
        return chunk

    def _scan(self, data: bytes, *, at_end: bool) -> None:
        buffer, position = self._pending + data, 0
        while True:
            found = buffer.find(self._delimiter, position)
            if found < 0:
                self._pending = buffer[max(position, len(buffer) - len(self._delimiter) + 1) :]
                return
            start = found + len(self._delimiter)
            end = buffer.find(b"\r\n\r\n", start, start + _PART_HEADER_BYTES + 4)
            if end < 0 and not at_end and len(buffer) - start < _PART_HEADER_BYTES + 4:
                self._pending = buffer[found:]  # the headers go on in the next chunk
                return
            headers = buffer[start : end if end >= 0 else start + _PART_HEADER_BYTES]
            try:
                headers.decode("utf-8")
            except UnicodeDecodeError:
                raise FormNotUtf8("a part's headers are not UTF-8") from None
            position = end + 4 if end >= 0 else start


class StrictUtf8Form(FileUploadHandler):
    """Put first among a request's upload handlers: it parses the whole multipart form itself, with
    the handlers after it receiving the files as usual. Raises ``FormNotUtf8`` (before the view
    sees any field) when a part's headers or a text field are not UTF-8."""

    def handle_raw_input(
        self, input_data: Any, META: dict[str, Any], content_length: int, boundary: bytes, encoding: str | None = None
    ) -> tuple[Any, Any]:
        others = list(self.request.upload_handlers)[1:] if self.request is not None else []
        parser = MultiPartParser(META, _PartHeadersChecked(input_data, boundary), others, _STRICT_UTF8)
        try:
            post, files = parser.parse()
        except UnicodeDecodeError:
            raise FormNotUtf8("a text field is not UTF-8") from None
        post.encoding = "utf-8"
        return post, files

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None
