"""What a customer's file is, judged by its bytes: an image we accept (re-encoded by Pillow, its
metadata gone) or a PDF, and nothing else.

No database here: ``inspect`` turns an incoming file into the bytes to store, or refuses it
with ``AttachmentRefused`` (a ValidationError whose message is written for the customer).
``tickets.services`` calls it before writing anything.
"""

from __future__ import annotations

import hashlib
import io
import re
import struct
import unicodedata
import warnings
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.storage import default_storage
from PIL import Image, UnidentifiedImageError

# Pillow's format name -> (content type, the extension a download gets).
IMAGE_FORMATS: dict[str, tuple[str, str]] = {
    "JPEG": ("image/jpeg", ".jpg"),
    "PNG": ("image/png", ".png"),
    "WEBP": ("image/webp", ".webp"),
}
PDF_TYPE = "application/pdf"
EXTENSIONS: dict[str, str] = {**dict(IMAGE_FORMATS.values()), PDF_TYPE: ".pdf"}
ACCEPTED_WORDS = "a photo (JPEG, PNG or WebP) or a PDF"
# What the file picker offers; the server still decides from the bytes.
ACCEPT_ATTRIBUTE = "image/jpeg,image/png,image/webp,application/pdf"
NAME_MAX_CHARS = 200

# A PDF as its readers find it (ISO 32000 7.5): the header and, at the very end, "startxref", the offset
# of the last cross-reference section and "%%EOF" (then line ends, padding or another "%%EOF", as some
# tools leave, at most); at that offset an "xref" table or a cross-reference stream object ("12 0 obj"),
# and a /Root after it.
_PDF_HEADER = re.compile(rb"%PDF-(?:1\.[0-7]|2\.0)\s")
_PDF_END = re.compile(rb"startxref\s+(\d{1,12})\s+(?:%%EOF[\s\x00]*)+\Z")
_PDF_XREF = re.compile(rb"\s*(?:xref\s|\d{1,10}\s+\d{1,5}\s+obj\b)")
# Readers look for the end in the last 1024 bytes.
_PDF_END_BYTES = 1024

# Control characters, folder separators, and bidi controls (marks, embeddings, overrides, isolates):
# a name is shown to staff, and an override makes it read as another ("invoice\u202efdp.exe" shows as
# "invoiceexe.pdf") and turns the text after it around. Right-to-left names show right without them.
_UNSAFE_NAME_CHARS = re.compile(r"[\x00-\x1f\x7f/\\\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


class AttachmentRefused(ValidationError):
    """A file we do not store; the message says why, in the customer's words. ``position``: which of
    the message's files it is (from 0), when the refusal is about one of them (``inspect_all``)."""

    position: int | None = None


@dataclass(frozen=True)
class IncomingFile:
    """A file as it arrived: the name the customer's device gave it, and its bytes."""

    name: str
    data: bytes


@dataclass(frozen=True)
class CheckedFile:
    """A file we will store: the bytes to store (an image re-encoded), their type and hash."""

    name: str
    content_type: str
    data: bytes
    sha256: str

    @property
    def extension(self) -> str:
        return EXTENSIONS[self.content_type]


def stored_file_problem(*, storage_name: str, sha256: str) -> str:
    """Why the file an attachment's row names is not in this deployment's storage as it was stored
    (missing, unreadable, or other bytes than its SHA-256); empty when it is. A state bundle carries
    the rows, not the files: after a move, this says whether the files were copied alongside."""
    digest = hashlib.sha256()
    try:
        with default_storage.open(storage_name, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except FileNotFoundError:
        return f"its file {storage_name} is not in this deployment's storage"
    except Exception as exc:  # noqa: BLE001 - any storage's error (a bucket denied, a folder unreadable)
        return f"its file {storage_name} cannot be read here ({type(exc).__name__}: {exc})"
    if digest.hexdigest() != sha256:
        return f"its file {storage_name} holds other bytes than were stored (SHA-256 {digest.hexdigest()[:12]}…)"
    return ""


def max_bytes() -> int:
    return int(settings.ATTACHMENT_MAX_BYTES)


def max_files() -> int:
    return int(settings.ATTACHMENT_MAX_FILES)


def size_words(size: int) -> str:
    """A size as a person reads it: 245 KB, 3.4 MB."""
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{round(size / 1024)} KB"
    return f"{size / (1024 * 1024):.1f} MB".replace(".0 MB", " MB")


def clean_name(name: str) -> str:
    """The file's name without any folder, control characters or surrounding dots and spaces,
    at most NAME_MAX_CHARS long (the extension kept); "attachment" when nothing is left."""
    name = unicodedata.normalize("NFC", str(name or ""))
    name = re.split(r"[/\\]", name)[-1]
    name = _UNSAFE_NAME_CHARS.sub("", name).strip(" .")
    # Lone surrogates and the like cannot be stored (nor shown).
    name = name.encode("utf-8", "ignore").decode("utf-8")
    if len(name) > NAME_MAX_CHARS:
        stem, dot, ext = name.rpartition(".")
        ext = ext if dot and len(ext) <= 10 else ""
        name = stem[: NAME_MAX_CHARS - len(ext) - 1] + "." + ext if ext else name[:NAME_MAX_CHARS]
    return name or "attachment"


def download_name(name: str, content_type: str) -> str:
    """The name a download gets: the customer's name, with the extension of what the file is."""
    stem, dot, _ = name.rpartition(".")
    return (stem if dot and stem else name) + EXTENSIONS.get(content_type, "")


def inspect(incoming: IncomingFile) -> CheckedFile:
    """The bytes to store for ``incoming``, or AttachmentRefused.

    The type comes from the content alone: a PNG named ``receipt.pdf`` is a PNG, an HTML page
    named ``photo.jpg`` is refused, and so is one that begins with ``%PDF-`` (a PDF has the frame
    of one, start to end). Images are decoded and encoded again, so what we store and
    serve is pixels Pillow wrote (no EXIF, GPS position, XMP or comments of the original; the
    EXIF orientation is applied first, so the photo stays upright).
    """
    name = clean_name(incoming.name)
    data = incoming.data
    limit = max_bytes()
    if len(data) > limit:
        raise AttachmentRefused(
            f"{name} is {size_words(len(data))}; a file can be at most {size_words(limit)}.", code="too_large"
        )
    if not data:
        raise AttachmentRefused(f"{name} is empty.", code="empty")
    if data.startswith(b"%PDF-"):
        if not _pdf_structure(data):
            raise _damaged(name)
        content_type, stored = PDF_TYPE, data
    else:
        content_type, stored = _reencoded_image(name, data)
    return CheckedFile(name=name, content_type=content_type, data=stored, sha256=hashlib.sha256(stored).hexdigest())


def inspect_all(files: list[IncomingFile]) -> list[CheckedFile]:
    if len(files) > max_files():
        raise AttachmentRefused(f"You can attach at most {max_files()} files to one message.", code="too_many_files")
    checked = []
    for position, incoming in enumerate(files):
        try:
            checked.append(inspect(incoming))
        except AttachmentRefused as refusal:
            # Told by its place, not its name: a phone names every photo "image.jpg", and the name the
            # refusal tells is the cleaned one, which the customer's device may not have given.
            refusal.position = position
            raise
    return checked


def _refused_type(name: str) -> AttachmentRefused:
    return AttachmentRefused(f"{name} is not a file we accept. Please send {ACCEPTED_WORDS}.", code="unsupported_type")


def _damaged(name: str) -> AttachmentRefused:
    return AttachmentRefused(f"{name} looks damaged and could not be opened.", code="damaged")


def _pdf_structure(data: bytes) -> bool:
    """Whether ``data`` has the frame of a PDF (see _PDF_END): its first bytes alone are any text
    with "%PDF-" in front (a page, a picture, a script), which must not be stored, nor offered to
    staff, as a PDF. What is inside the objects is the reader's business, not ours."""
    if not _PDF_HEADER.match(data):
        return False
    tail_at = max(0, len(data) - _PDF_END_BYTES)
    start = data.rfind(b"startxref", tail_at)
    end = _PDF_END.match(data, start) if start >= 0 else None
    if end is None:
        return False
    offset = int(end.group(1))
    if not 0 < offset < start or _PDF_XREF.match(data, offset) is None:
        return False
    return data.find(b"/Root", offset, start) >= 0


def _reencoded_image(name: str, data: bytes) -> tuple[str, bytes]:
    max_pixels = int(settings.ATTACHMENT_MAX_PIXELS)
    try:
        # Pillow warns past MAX_IMAGE_PIXELS and raises past twice that: both are refusals here.
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=list(IMAGE_FORMATS)) as probe:
                # A phone's JPEG with a second picture (a depth or gain map) opens as "MPO": a JPEG.
                fmt = "JPEG" if probe.format == "MPO" else str(probe.format)
                if probe.width * probe.height > max_pixels:
                    raise AttachmentRefused(
                        f"{name} is {probe.width}×{probe.height} pixels; an image can have at most "
                        f"{max_pixels // 1_000_000} million pixels.",
                        code="too_many_pixels",
                    )
                probe.verify()  # checks the structure (and PNG checksums) without decoding
            with Image.open(io.BytesIO(data), formats=[fmt]) as image:
                image.load()
                return IMAGE_FORMATS[fmt][0], _encode(image, fmt)
    except AttachmentRefused:
        raise
    except UnidentifiedImageError:
        raise _refused_type(name) from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise AttachmentRefused(f"{name} is too large an image to open.", code="too_many_pixels") from None
    except (OSError, SyntaxError, ValueError, EOFError, TypeError, KeyError, IndexError, struct.error):
        # Looked like an accepted image but its data is broken (truncated, corrupt, odd metadata): a
        # refusal the customer reads, never a failed request.
        raise _damaged(name) from None


# EXIF orientation -> the turns that make the picture upright (as ImageOps.exif_transpose applies
# them, without rewriting the EXIF: a photo whose other tags are written oddly still opens).
_ORIENTATION = {
    2: (Image.Transpose.FLIP_LEFT_RIGHT,),
    3: (Image.Transpose.ROTATE_180,),
    4: (Image.Transpose.FLIP_TOP_BOTTOM,),
    5: (Image.Transpose.TRANSPOSE,),
    6: (Image.Transpose.ROTATE_270,),
    7: (Image.Transpose.TRANSVERSE,),
    8: (Image.Transpose.ROTATE_90,),
}


def _upright(image: Image.Image) -> Image.Image:
    try:
        orientation = int(image.getexif().get(0x0112) or 1)
    except (TypeError, ValueError, KeyError, IndexError, OSError, SyntaxError, struct.error):
        orientation = 1  # metadata that cannot be read: the picture as it is stored
    upright = image.copy()
    for turn in _ORIENTATION.get(orientation, ()):
        upright = upright.transpose(turn)
    return upright


def _encode(image: Image.Image, fmt: str) -> bytes:
    icc_profile = image.info.get("icc_profile")  # colours, not who or where: kept
    # Which pixels are see-through (a PNG's tRNS: palette entries, or one grey or RGB colour) is part
    # of the picture, not metadata about it: kept, or a cut-out logo reaches staff on a solid block.
    transparency = image.info.get("transparency")
    upright = _upright(image)  # a copy; the first frame of an animation
    # Nothing of the original's metadata goes along.
    upright.info = {} if transparency is None else {"transparency": transparency}
    options: dict[str, object] = {}
    if fmt == "JPEG":
        if upright.mode not in {"L", "RGB", "CMYK"}:
            upright = upright.convert("RGB")
        options = {"quality": 90}
    elif fmt == "WEBP":
        if upright.mode not in {"RGB", "RGBA"}:
            upright = upright.convert("RGBA")
        options = {"quality": 90}
    if icc_profile:
        options["icc_profile"] = icc_profile
    out = io.BytesIO()
    upright.save(out, fmt, **options)
    return out.getvalue()
