"""A ticket moved to a new deployment carries its attachments' records, not their files (the operator copies
the media storage alongside): ``verify_state --database`` must say when a customer's photo did not arrive,
or arrived as other bytes, rather than pass a ticket whose photos are gone."""

from __future__ import annotations

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from tests.state.conftest import export, paused_ticket, verify
from tests.state.test_bundle import empty_the_ledger, restore
from tests.tickets.files import png_bytes, post_with_files
from tickets.models import Attachment

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


@pytest.fixture
def moved(tmp_path, media):  # noqa: ANN001, ANN201
    """A ticket with the customer's photo, exported, and restored into an emptied ledger; the files are
    where the old deployment stored them (as if the media storage was copied alongside)."""
    ticket, _ = paused_ticket()
    post_with_files(ticket, [("broken-lamp.png", png_bytes())], body="Here is the photo")
    attachment = Attachment.objects.get(message__ticket=ticket)
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger()
    restore(path)
    return path, attachment


def test_verify_passes_when_the_photos_were_copied_alongside(moved):
    path, _ = moved

    status, out = verify(path, database=True)

    assert status == 0, out


def test_verify_fails_a_move_whose_photo_file_did_not_arrive(moved):
    path, attachment = moved
    default_storage.delete(attachment.storage_name)  # the media storage was not copied

    status, out = verify(path, database=True)

    assert status == 1, out
    assert f"tickets.Attachment {attachment.pk}" in out and attachment.storage_name in out, out


def test_verify_fails_a_move_whose_photo_file_holds_other_bytes(moved):
    path, attachment = moved
    default_storage.delete(attachment.storage_name)
    default_storage.save(attachment.storage_name, ContentFile(png_bytes(colour=(1, 2, 3))))

    status, out = verify(path, database=True)

    assert status == 1, out
    assert f"tickets.Attachment {attachment.pk}" in out, out
