"""The folder customers' attachments are stored in (MEDIA_ROOT, with the default storage) is checked at
start: one that cannot be made or written to stops the process, naming the variable. It was found only
when the first customer sent a photo, and that message was answered with a 500."""

from __future__ import annotations

import json

import pytest

from tests.support.test_configuration import start_django

GOOD = {"DATABASE_URL": "postgres://u@h/db", "REDIS_URL": "redis://h/0", "DEBUG": "1"}


def a_file(tmp_path):  # noqa: ANN001, ANN201
    """A file where a folder is wanted: no process can make or write a folder under it (root neither)."""
    path = tmp_path / "a-file"
    path.write_text("not a folder\n")
    return path


@pytest.mark.parametrize("where", ["the-file-itself", "under-the-file"])
def test_a_media_root_that_cannot_be_written_stops_the_process_naming_it(tmp_path, where):  # noqa: ANN001
    media = a_file(tmp_path) if where == "the-file-itself" else a_file(tmp_path) / "media"

    result = start_django(tmp_path, **GOOD, MEDIA_ROOT=str(media))

    assert result.returncode != 0, "an unwritable MEDIA_ROOT started the process"
    last = result.stderr.splitlines()[-1]
    assert f"MEDIA_ROOT={str(media)!r}" in last and "attachments" in last, result.stderr[-600:]


def test_the_storage_options_location_is_named_when_it_is_the_folder(tmp_path):  # noqa: ANN001
    options = json.dumps({"location": str(a_file(tmp_path) / "media")})

    result = start_django(tmp_path, **GOOD, MEDIA_STORAGE_OPTIONS=options)

    assert result.returncode != 0, "an unwritable storage location started the process"
    assert "MEDIA_STORAGE_OPTIONS" in result.stderr.splitlines()[-1], result.stderr[-600:]


def test_options_the_folder_storage_does_not_take_stop_the_process_naming_them(tmp_path):  # noqa: ANN001
    result = start_django(tmp_path, **GOOD, MEDIA_STORAGE_OPTIONS=json.dumps({"bucket_name": "support"}))

    assert result.returncode != 0, "a bucket's options for the folder storage started the process"
    last = result.stderr.splitlines()[-1]
    assert "MEDIA_STORAGE_OPTIONS" in last and "bucket_name" in last, result.stderr[-600:]


def test_a_missing_media_root_is_made_at_start(tmp_path):  # noqa: ANN001
    media = tmp_path / "not-yet" / "media"

    result = start_django(tmp_path, **GOOD, MEDIA_ROOT=str(media))

    assert result.returncode == 0, result.stderr[-600:]
    assert media.is_dir()
    assert list(media.iterdir()) == []  # the check leaves nothing behind


def test_another_storage_does_not_need_the_media_root(tmp_path):  # noqa: ANN001
    result = start_django(
        tmp_path,
        **GOOD,
        MEDIA_ROOT=str(a_file(tmp_path) / "media"),
        MEDIA_STORAGE_BACKEND="django.core.files.storage.InMemoryStorage",
    )

    assert result.returncode == 0, result.stderr[-600:]
