"""What PostgreSQL can hold: for input it refuses (``unstorable``), and for text the product records
rather than refuses.

Text and jsonb hold neither NUL characters nor lone surrogates. What a person types is refused
with a clear error (support.middleware, tickets.services); what the product records from
elsewhere (a model's reply, a tool's result or error) is kept, without those characters: losing
a NUL loses nothing a reader could see, and refusing it would fail the step that carries it.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

# JSON nested deeper than this is refused as input (no form or client of ours nests past a few levels).
MAX_JSON_DEPTH = 32


class KeyTwice(ValueError):
    """A JSON object names this key twice (``each_key_once``)."""


def each_key_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys differ (``json.loads``'s ``object_pairs_hook``): with a key named
    twice, which value counts is the parser's choice and the other is lost unread (a message's body,
    a confirmation's answer, a bundle row's column). Raises ``KeyTwice``."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise KeyTwice(key)
            seen.add(key)
    return obj


def unstorable(value: Any, depth: int = 0) -> str | None:
    """Why PostgreSQL could not store this (text, or parsed JSON: every key and value), or None."""
    if depth > MAX_JSON_DEPTH:
        return "is nested too deeply"
    if isinstance(value, str):
        if "\x00" in value:
            return "contains a NUL character"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "contains characters that are not valid Unicode"
        return None
    if isinstance(value, dict):
        items = [*value.keys(), *value.values()]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        return None
    for item in items:
        reason = unstorable(item, depth + 1)
        if reason:
            return reason
    return None


def clean_text(text: str) -> str:
    """``text`` without NUL characters, lone surrogates replaced (U+FFFD)."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def clean_piece(held: str, piece: str) -> tuple[str, str]:
    """A piece of text that comes in parts (a model's streamed answer), made ready to keep and send as
    ``clean_text`` makes the whole: (the text, what is held back for the next piece). An emoji's two
    UTF-16 halves may come in two pieces (a gateway that cuts text by code units): a first half at the
    end is held until the second comes, and the two go as the one character they are."""
    text = held + piece
    held = ""
    if text and "\ud800" <= text[-1] <= "\udbff":
        text, held = text[:-1], text[-1]
    return clean_text(text), held


def clean_json(value: Any) -> Any:
    """``value`` as jsonb holds it: JSON types only (anything else as its text), every string
    and key cleaned as ``clean_text`` cleans it."""
    text = json.dumps(value, default=str)  # ASCII: a NUL or a surrogate shows as its escape
    loaded = json.loads(text)
    return _clean(loaded) if "\\u0000" in text or "\\ud" in text else loaded


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(key): _clean(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_clean(item) for item in value]
    return value


# Letters and symbols drawn as blank space (Braille blank, the Hangul fillers), and marks that only
# change the character before them and alone draw nothing: variation selectors (an emoji's "as a
# picture", the Mongolian ones, the ideographic ones) and the combining grapheme joiner.
_BLANK_LOOKING = frozenset(
    "\u2800\u3164\u115f\u1160\uffa0\u034f\u180b\u180c\u180d\u180f"
    + "".join(map(chr, range(0xFE00, 0xFE10)))
    + "".join(map(chr, range(0xE0100, 0xE01F0)))
)
# Control, format (zero-width, byte-order mark) and separator characters show nothing either.
_UNSEEN = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})


def shows_something(text: str) -> bool:
    """Does ``text`` show anything to a reader? An empty bubble is what blanks, zero-width and other
    format or control characters, and letters drawn as blank space, make alone (a customer's message
    of them is refused as empty; a model's answer of them is no answer)."""
    return any(not ch.isspace() and ch not in _BLANK_LOOKING and unicodedata.category(ch) not in _UNSEEN for ch in text)
