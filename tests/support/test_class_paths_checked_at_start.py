"""The classes named by the environment (the mail backend, the attachments' storage) are imported at
start: a name that does not import stops the process, naming the variable.

Django imports both at first use, so a typo started every process without a word; then the first
password-reset mail or agent email failed, and every customer's first attachment was a 500.
"""

from __future__ import annotations

import pytest

from tests.support.test_configuration import start_django

GOOD = {"DATABASE_URL": "postgres://u@h/db", "REDIS_URL": "redis://h/0", "DEBUG": "1"}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("EMAIL_BACKEND", "no.such.EmailBackend"),
        ("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackendd"),
        ("EMAIL_BACKEND", "smtp"),
        ("MEDIA_STORAGE_BACKEND", "storages.backends.s3.NoSuchStorage"),
        ("MEDIA_STORAGE_BACKEND", "django.core.files.storage.FileSystemStorag"),
    ],
)
def test_a_class_that_does_not_import_stops_the_process_at_start_naming_the_variable(tmp_path, name, value):
    result = start_django(tmp_path, **{**GOOD, name: value})

    assert result.returncode != 0, f"{name}={value!r} started the process"
    assert f"{name}={value!r}" in result.stderr.splitlines()[-1], result.stderr[-600:]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend"),
        ("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend"),
        ("MEDIA_STORAGE_BACKEND", "django.core.files.storage.FileSystemStorage"),
    ],
)
def test_a_class_that_imports_starts(tmp_path, name, value):
    result = start_django(tmp_path, **{**GOOD, name: value})

    assert result.returncode == 0, result.stderr[-600:]
