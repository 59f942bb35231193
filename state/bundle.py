"""The bundle on disk: a manifest and one JSON Lines file per part, in a directory or a .tar file.

```
manifest.json        format, app version, migrations, created at, selection, parts with rows and SHA-256
manifest.sha256      the SHA-256 of manifest.json: no byte of the bundle is unchecked
manifest.hmac        the HMAC-SHA256 of manifest.json under STATE_BUNDLE_KEY (state.signature): who wrote it
parts/<label>.jsonl  one row per line, keys sorted, rows in primary-key order
```

The same rows always give the same bytes, so two exports of the same state have the same
part digests; only the manifest's ``created_at`` differs.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from state import signature
from state.rows import Row
from support.storable import KeyTwice, each_key_once

FORMAT = "support-state-bundle"
# The version export writes. 3: the bundle may carry manifest.hmac, its signature (a release that reads
# 1 and 2 refuses it for its version, rather than as a file the manifest does not list). 2: a user row
# carries the superuser flag and the user's own permissions (``app_label.codename``); 1 carried neither.
# 1 and 2 were never signed: they are read only when the operator accepts an unsigned bundle.
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
MANIFEST = signature.SIGNED_FILE
MANIFEST_DIGEST = "manifest.sha256"
SIGNATURE = signature.SIGNATURE


class BundleError(Exception):
    """The bundle cannot be trusted or read; ``problems`` says why, one sentence each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class SignatureError(BundleError):
    """Nothing proves the bundle was written by a deployment holding the key: its signature does not
    hold, or it has none (or none that can be checked here) and the operator did not accept that."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def encode_rows(rows: list[Row]) -> bytes:
    return "".join(
        json.dumps(r, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n" for r in rows
    ).encode()


def decode_rows(data: bytes, *, name: str = "a part") -> list[Row]:
    """The rows of a part's bytes (``name`` is its file). Raises ``BundleError`` naming the line that
    is not a JSON value (cut short, or not UTF-8): a bundle edited with digests written again to match."""
    rows = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line:
            continue
        try:
            rows.append(json.loads(line.decode(), object_pairs_hook=each_key_once))
        except KeyTwice as twice:
            raise BundleError([f"{name}: line {number} names {str(twice)[:40]!r} twice"]) from None
        except (ValueError, RecursionError):  # UnicodeDecodeError too; JSON nested past the parser's depth
            raise BundleError([f"{name}: line {number} is not a JSON row (cut short, or not UTF-8)"]) from None
    return rows


@dataclass
class Bundle:
    manifest: dict[str, Any]
    authenticity: signature.Authenticity
    files: dict[str, bytes] = field(default_factory=dict)

    def rows(self, label: str) -> list[Row]:
        entry = self.part_entry(label)
        return decode_rows(self.files[entry["file"]], name=entry["file"]) if entry else []

    def part_entry(self, label: str) -> dict[str, Any] | None:
        return next((p for p in self.manifest["parts"] if p["label"] == label), None)

    @property
    def labels(self) -> list[str]:
        return [p["label"] for p in self.manifest["parts"]]


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    return (json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def manifest_digest_bytes(body: bytes) -> bytes:
    """``manifest.sha256`` for the manifest's bytes, as ``sha256sum`` writes it."""
    return f"{sha256(body)}  {MANIFEST}\n".encode()


def write(path: Path, manifest: dict[str, Any], parts: dict[str, bytes], *, key: bytes | None) -> None:
    """Write the bundle at ``path``: a .tar file if the name ends in .tar, else a new directory;
    signed with ``key`` (unsigned when None).

    ``manifest["parts"]`` must already list every part with its digest. Nothing is left at
    ``path`` if writing fails; an existing file or a non-empty directory is not overwritten.
    """
    body = manifest_bytes(manifest)
    files = {MANIFEST: body, MANIFEST_DIGEST: manifest_digest_bytes(body), **parts}
    if key is not None:
        files[SIGNATURE] = signature.sign(body, key)
    if path.exists() and (path.is_file() or any(path.iterdir())):
        raise BundleError([f"{path} already exists; choose a new path"])
    try:
        _write_at(path, files)
    except OSError as exc:  # a parent that is a file, a folder that cannot be written, a full disk
        where = f"{exc.filename}: " if exc.filename and str(exc.filename) != str(path) else ""
        raise BundleError([f"cannot write {path}: {where}{exc.strerror or exc}"]) from None


def _write_at(path: Path, files: dict[str, bytes]) -> None:
    parent = path.parent
    parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".tar":
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=".bundle-", suffix=".tar")
        try:
            with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for name in sorted(files):
                    info = tarfile.TarInfo(name)
                    info.size, info.mode, info.mtime = len(files[name]), 0o644, 0
                    tar.addfile(info, io.BytesIO(files[name]))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return
    tmp_dir = Path(tempfile.mkdtemp(dir=parent, prefix=".bundle-"))
    try:
        for name, data in files.items():
            target = tmp_dir / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        if path.exists():
            path.rmdir()
        os.replace(tmp_dir, path)
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise


def _not_a_bundle(path: Path) -> BundleError:
    return BundleError([f"{path} has no {MANIFEST} and {MANIFEST_DIGEST}: not a state bundle"])


def _read_files(path: Path) -> dict[str, bytes]:
    """Every file of the bundle at ``path``, by name; a path that cannot be read (not allowed to this user,
    a name too long) is refused with the system's reason."""
    try:
        return _files_at(path)
    except OSError as exc:
        raise BundleError([f"cannot read {path}: {exc.strerror or exc}"]) from None


def _files_at(path: Path) -> dict[str, bytes]:
    """What is not a bundle (no manifest) is refused before any file is read: a directory or an archive
    given by mistake may hold gigabytes."""
    if path.is_dir():
        if not all((path / name).is_file() for name in (MANIFEST, MANIFEST_DIGEST)):
            raise _not_a_bundle(path)
        return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}
    if not path.is_file():
        raise BundleError([f"no bundle at {path}"])
    try:
        with tarfile.open(path, mode="r:") as tar:
            members = tar.getmembers()
            names: set[str] = set()
            for member in members:
                # A sparse file stores its holes as a list of lengths: a few bytes in the archive read as
                # gigabytes of zeros, held in memory here. Export writes plain files only.
                if not member.isfile() or member.issparse():
                    raise BundleError([f"{path}: {member.name} is not a plain file"])
                if member.name in names:  # which copy counts would be the reader's choice
                    copies = sum(1 for other in members if other.name == member.name)
                    raise BundleError([f"{path}: {member.name} is in the archive {copies} times"])
                names.add(member.name)
            if not {MANIFEST, MANIFEST_DIGEST} <= names:
                raise _not_a_bundle(path)
            files = {}
            for member in members:
                extracted = tar.extractfile(member)
                files[member.name] = extracted.read() if extracted else b""
            return files
    except tarfile.TarError as exc:
        raise BundleError([f"{path} is not a readable bundle ({exc})"]) from None


def _part_entry_problem(entry: object) -> str:
    """Why ``entry`` cannot be a part of the manifest (its label, file, digest and row count); empty when it can."""
    if not isinstance(entry, dict):
        return f"a part that is not an object ({type(entry).__name__})"
    wanted = {"label": str, "file": str, "sha256": str, "rows": int}
    missing = sorted(set(wanted) - set(entry))
    if missing:
        return f"a part without {', '.join(missing)} ({sorted(map(str, entry))})"
    wrong = [key for key, kind in wanted.items() if not isinstance(entry[key], kind) or isinstance(entry[key], bool)]
    return f"part {entry.get('file')!r}: {', '.join(wrong)} of the wrong type" if wrong else ""


# What a manifest of this release always carries (state.export writes them all), and what each is;
# "migrations", "profiles" and "active_profile" are checked where there (their readers say what
# their absence means). Checked once here: no reader of the manifest meets a value of another type.
MANIFEST_KEYS = ("format_version", "created_at", "app", "personal_data", "selection", "counts", "tools", "settings",
                 "secrets")  # fmt: skip


def _is_list_of(value: Any, kind: type) -> bool:
    return isinstance(value, list) and all(isinstance(v, kind) and not isinstance(v, bool) for v in value)


def _is_map_of(value: Any, check: Any) -> bool:
    return isinstance(value, dict) and all(check(v) for v in value.values())


def _manifest_problems(manifest: dict[str, Any]) -> list[str]:
    """Why the manifest is not one this release writes: a key left out, or a value of another type."""
    absent = [f"the manifest has no {key!r}" for key in MANIFEST_KEYS if key not in manifest]
    app, selection, secrets = manifest.get("app"), manifest.get("selection"), manifest.get("secrets")
    shapes = {
        "created_at": isinstance(manifest.get("created_at"), str),
        "app": isinstance(app, dict)
        and all(isinstance(app.get(k), str) for k in ("name", "version"))
        and isinstance(app.get("revision"), str | None),
        "personal_data": isinstance(manifest.get("personal_data"), bool),
        "selection": isinstance(selection, dict)
        and _is_list_of(selection.get("tickets"), int)
        and all(isinstance(selection.get(k), bool) for k in ("all", "open_only"))
        and _is_list_of(selection.get("carried_for_refunds", []), int),
        "counts": _is_map_of(manifest.get("counts"), lambda n: isinstance(n, int) and not isinstance(n, bool)),
        "tools": _is_map_of(
            manifest.get("tools"),
            lambda t: (
                isinstance(t, dict)
                and isinstance(t.get("replay_policy"), str)
                and isinstance(t.get("policy_may_ask_approval"), bool)
            ),
        ),
        "settings": isinstance(manifest.get("settings"), dict),
        "secrets": isinstance(secrets, dict)
        and _is_list_of(secrets.get("not_included"), str)
        and _is_map_of(secrets.get("withheld_from_rows"), lambda n: isinstance(n, int)),
        "migrations": _is_map_of(manifest.get("migrations", {}), lambda names: _is_list_of(names, str)),
        "profiles": _is_list_of(manifest.get("profiles", []), int),
        "active_profile": isinstance(manifest.get("active_profile"), dict | None),
    }
    wrong = [
        f"the manifest's {key!r} is not what this release writes there ({type(manifest[key]).__name__}: "
        f"{json.dumps(manifest[key], default=str)[:60]})"
        for key, ok in shapes.items()
        if key in manifest and not ok
    ]
    return absent + wrong


def read(path: Path, *, allow_unsigned: bool = False) -> Bundle:
    """Read a bundle and check every byte of it: the manifest's digest, its signature under this
    deployment's ``STATE_BUNDLE_KEY``, the format, every part's digest and row count, no file missing
    and none unaccounted for. Raises ``BundleError``; ``SignatureError`` when the signature does not
    hold, or when there is none (or no key here to check it) unless ``allow_unsigned``."""
    files = _read_files(path)
    problems: list[str] = []
    body, recorded = files.get(MANIFEST), files.get(MANIFEST_DIGEST)
    if body is None or recorded is None:
        raise _not_a_bundle(path)
    if recorded != manifest_digest_bytes(body):
        # Nothing it says can be trusted, not even the shape of what it lists: refused here.
        raise BundleError([f"{MANIFEST} does not match its SHA-256 in {MANIFEST_DIGEST}: the manifest was changed"])
    # Who wrote it, before anything it says is read: the manifest holds every part's digest.
    authenticity = signature.check(body, files.get(SIGNATURE), signature.configured_key())
    if authenticity.trust == signature.Trust.FORGED:
        raise SignatureError([authenticity.detail])
    if not authenticity.proven and not allow_unsigned:
        raise SignatureError([signature.refusal(authenticity)])
    try:
        manifest = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: JSON nested past the parser's depth
        raise BundleError([*problems, f"{MANIFEST} is not JSON"]) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError([*problems, f"{MANIFEST} is not the manifest of a {FORMAT}"])
    version = manifest.get("format_version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        readable = ", ".join(map(str, READABLE_VERSIONS[:-1])) + f" and {READABLE_VERSIONS[-1]}"
        raise BundleError([*problems, f"format version {version!r}; this release reads versions {readable}"])
    parts = manifest.get("parts", [])
    if not isinstance(parts, list):
        raise BundleError([*problems, f"{MANIFEST}: its parts are not a list"])
    problems += _manifest_problems(manifest)
    listed = {MANIFEST, MANIFEST_DIGEST, SIGNATURE}
    for entry in parts:
        shape = _part_entry_problem(entry)
        if shape:
            problems.append(f"{MANIFEST}: {shape}")
            continue
        name = entry["file"]
        listed.add(name)
        data = files.get(name)
        if data is None:
            problems.append(f"{name} is missing")
            continue
        if sha256(data) != entry["sha256"]:
            problems.append(f"{name} does not match its SHA-256 in the manifest: it was changed")
            continue
        lines = data.count(b"\n")
        if lines != entry["rows"]:
            problems.append(f"{name} has {lines} rows; the manifest says {entry['rows']}")
    for name in sorted(set(files) - listed):
        problems.append(f"{name} is not in the manifest")
    # A part is read from one entry: listed twice (an empty file first, say), which one holds its rows?
    entries = [entry for entry in parts if not _part_entry_problem(entry)]
    for key, what in (("label", "the part"), ("file", "the file")):
        for value, count in sorted(Counter(entry[key] for entry in entries).items()):
            if count > 1:
                problems.append(f"{MANIFEST}: {what} {value} is listed {count} times")
    if problems:
        raise BundleError(problems)
    return Bundle(manifest=manifest, authenticity=authenticity, files=files)
