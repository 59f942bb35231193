"""Who wrote a bundle: an HMAC-SHA256 of its manifest under the key both deployments share.

A bundle's digests are its own: anyone who can hand an operator a file can write rows (a superuser,
a member of staff with the right to decide approvals) and digests that match them. The signature is
what a forger cannot write without ``STATE_BUNDLE_KEY``, set to the same value on the deployment
that exports and on the one that restores.

What is signed is ``manifest.json``, byte for byte. It holds the SHA-256 of every part, and a
bundle read (``state.bundle.read``) has no file the manifest does not list but its own digest and
this signature: a byte changed in any part changes its digest, which no longer matches the signed
manifest. ``manifest.hmac`` holds the signature and the key's id (an HMAC of a fixed text under the
key, which tells "signed with another key" from "changed after it was signed", and says nothing of
the key itself). The signature is compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from enum import StrEnum

from django.conf import settings

SIGNATURE = "manifest.hmac"
SIGNED_FILE = "manifest.json"  # state.bundle.MANIFEST
ALGORITHM = "HMAC-SHA256"
KEY_SETTING = "STATE_BUNDLE_KEY"
ALLOW_UNSIGNED_FLAG = "--allow-unsigned"
_KEY_ID_TEXT = b"support-state-bundle key id"
_KEY_ID_CHARS = 16
_MAX_SIGNATURE_BYTES = 512  # what sign writes is under 200
_HEX = {"key_id": re.compile(rf"[0-9a-f]{{{_KEY_ID_CHARS}}}"), "hmac": re.compile(r"[0-9a-f]{64}")}


class Trust(StrEnum):
    SIGNED = "signed"  # the signature holds under this deployment's key
    FORGED = "forged"  # a signature that does not hold: refused, whatever the flags
    UNSIGNED = "unsigned"  # no signature (format 1 or 2, or exported with --allow-unsigned)
    UNCHECKED = "unchecked"  # signed, but no key here to check it with


@dataclass(frozen=True)
class Authenticity:
    trust: Trust
    detail: str  # one sentence: what is known of who wrote the bundle

    @property
    def proven(self) -> bool:
        return self.trust == Trust.SIGNED


def configured_key() -> bytes | None:
    """This deployment's ``STATE_BUNDLE_KEY`` (checked at start: at least 32 characters), or None."""
    key = getattr(settings, KEY_SETTING, "")
    return key.encode() if key else None


def key_id(key: bytes) -> str:
    return hmac.new(key, _KEY_ID_TEXT, hashlib.sha256).hexdigest()[:_KEY_ID_CHARS]


def _mac(key: bytes, manifest: bytes) -> str:
    return hmac.new(key, manifest, hashlib.sha256).hexdigest()


def _signature_bytes(key_id: str, mac: str) -> bytes:
    body = {"algorithm": ALGORITHM, "key_id": key_id, "signed_file": SIGNED_FILE, "hmac": mac}
    return (json.dumps(body, sort_keys=True, indent=2) + "\n").encode()


def sign(manifest: bytes, key: bytes) -> bytes:
    """The bytes of ``manifest.hmac`` for the manifest's bytes."""
    return _signature_bytes(key_id(key), _mac(key, manifest))


def _parse(signature: bytes) -> tuple[str, str] | None:
    """The key id and HMAC of a signature file exactly as ``sign`` writes it; None for anything else."""
    if len(signature) > _MAX_SIGNATURE_BYTES:
        return None  # not parsed at all: JSON nested deep enough stops a parser with a RecursionError
    try:
        body = json.loads(signature)
    except ValueError:  # UnicodeDecodeError too
        return None
    if not isinstance(body, dict) or set(body) != {"algorithm", "key_id", "signed_file", "hmac"}:
        return None
    if body["algorithm"] != ALGORITHM or body["signed_file"] != SIGNED_FILE:
        return None
    if not all(isinstance(body[name], str) and pattern.fullmatch(body[name]) for name, pattern in _HEX.items()):
        return None
    if signature != _signature_bytes(body["key_id"], body["hmac"]):
        return None  # a byte changed where JSON does not see it (spacing, order): not as it was written
    return body["key_id"], body["hmac"]


def check(manifest: bytes, signature: bytes | None, key: bytes | None) -> Authenticity:
    """Whether ``signature`` (the signature file's bytes, None when there is none) holds for the
    manifest's bytes under ``key`` (this deployment's, None when none is set)."""
    if signature is None:
        return Authenticity(
            Trust.UNSIGNED,
            f"the bundle is not signed (no {SIGNATURE}: written by a release before signatures, or exported "
            f"with {ALLOW_UNSIGNED_FLAG}, or its signature was removed): nothing proves who wrote it",
        )
    parsed = _parse(signature)
    if parsed is None:
        return Authenticity(Trust.FORGED, f"{SIGNATURE} is not a signature this release writes: it was changed")
    their_key, mac = parsed
    if key is None:
        return Authenticity(
            Trust.UNCHECKED,
            f"the bundle is signed (key id {their_key}), but {KEY_SETTING} is not set here: its signature "
            "cannot be checked, and nothing proves who wrote it",
        )
    ours = key_id(key)
    if hmac.compare_digest(_mac(key, manifest).encode(), mac.encode()) and their_key == ours:
        return Authenticity(Trust.SIGNED, f"{ALGORITHM} of {SIGNED_FILE} holds under {KEY_SETTING} (key id {ours})")
    if their_key != ours:
        return Authenticity(
            Trust.FORGED,
            f"the signature does not hold: {SIGNATURE} names the key id {their_key}, this deployment's "
            f"{KEY_SETTING} is {ours}; the bundle was signed with another key, or forged (set the key of the "
            "deployment that exported it)",
        )
    return Authenticity(
        Trust.FORGED,
        f"the signature does not hold under {KEY_SETTING} (key id {ours}): {SIGNED_FILE} was changed after it "
        "was signed, or the signature was forged",
    )


def refusal(authenticity: Authenticity) -> str:
    """Why a bundle is refused without ``--allow-unsigned``, and what to do."""
    return (
        f"{authenticity.detail}; set {KEY_SETTING} to the key of the deployment that exported it, or pass "
        f"{ALLOW_UNSIGNED_FLAG} if you accept a bundle anyone who could hand you the file could have written "
        "(the rights it grants are then printed)"
    )
