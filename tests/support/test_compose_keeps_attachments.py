"""`docker compose up` keeps customers' attachments in a volume, as it keeps the database's rows: in the
web container's own layer they were lost when the container was made again (`up --build` after an
upgrade), while the rows that name them stayed. The image makes the folder the app user's, so a new
volume there is writable (a volume on a folder the image lacks is root's, and the start check refuses
it)."""

from __future__ import annotations

import re

import yaml

from tests.support.test_compose_seeds_demo_only_when_asked import compose_environment
from tests.support.test_configuration import ROOT

APP = "/app"  # the image's WORKDIR: BASE_DIR there
APP_SERVICES = ("migrate", "web", "worker", "beat")


def media_root_in_the_image() -> str:
    environ = compose_environment({})
    if "MEDIA_ROOT" in environ:
        return environ["MEDIA_ROOT"]
    return f"{environ.get('EMBEDDED_DIR', APP + '/var')}/media"


def test_every_app_service_mounts_a_named_volume_at_the_attachments_folder():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    media = media_root_in_the_image()

    for service in APP_SERVICES:
        mounts = [str(volume) for volume in compose["services"][service].get("volumes", [])]
        named = [mount.split(":")[0] for mount in mounts if mount.split(":")[1:2] == [media]]
        assert named, f"{service} keeps attachments ({media}) in its container's own layer: {mounts}"
        assert named[0] in compose["volumes"], f"{named[0]} is not a named volume of the stack"


def test_the_image_makes_the_attachments_folder_the_app_users():
    dockerfile = (ROOT / "Dockerfile").read_text()
    media = media_root_in_the_image()

    made = re.search(rf"mkdir -p [^\n&]*{re.escape(media)}(\s|$)", dockerfile)
    owned = re.search(rf"chown (-R )?app:app [^\n&]*{re.escape(media)}(\s|$)", dockerfile) or re.search(
        rf"chown -R app:app [^\n&]*{re.escape(APP)}/var(\s|$)", dockerfile
    )
    assert made and owned, f"the image does not make {media} the app user's"
