"""A bundle never carries the secrets a profile version sends to its model endpoint.

A version's model parameters are sent with every request the runs on it make: besides the sampling
values (temperature...), an operator puts there what the endpoint needs of them, extra headers or a
body carrying a key. The bundle carried them as they were, in the version's row and in the manifest's
active version, to anyone the file was handed to. Now it carries the generation parameters by value
and any other by name only; restore asks the operator for those values (``--model-parameters``),
refusing, with nothing written, until they are given: the restored version then asks the model as
the exported one did.
"""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agents import runner
from agents.models import AgentProfile, AgentRun
from agents.profiles import profile_new_version
from agents.runner import advance
from tests.agents.openai_server import OpenAIServer
from tests.conftest import make_customer
from tests.state.conftest import bundle_bytes, export, verify
from tests.state.test_bundle import empty_the_ledger
from tickets import services as ticket_services
from tickets.models import Ticket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

HEADER_KEY = "hdr-4f1c2b9e77a0d3c5"
BODY_KEY = "body-0a7d5e31c9f2b864"
PARAMETERS = {
    "temperature": 0.2,
    "extra_headers": {"X-Gateway-Key": HEADER_KEY},
    "extra_body": {"api_key": BODY_KEY},
}


@pytest.fixture
def server(settings):  # noqa: ANN001, ANN201
    server = OpenAIServer().start()
    settings.OPENAI_BASE_URL = server.url
    runner._models.clear()  # built once per process: this test's endpoint, not an earlier test's
    yield server
    server.stop()
    runner._models.clear()


def a_ticket_on_a_version_with_secrets(server: OpenAIServer) -> tuple[Ticket, int]:
    profile = profile_new_version(changes={"model": "openai:gateway-model", "model_parameters": PARAMETERS}, user=None)
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Hello", body="Where is my parcel?")
    server.enqueue_text("Could you give me the order number?")
    advance(ticket.pk)
    assert server.headers[-1].get("x-gateway-key") == HEADER_KEY  # the endpoint is asked with it
    return ticket, profile.version


def restore(path, **options: object) -> str:  # noqa: ANN001
    out = io.StringIO()
    call_command("restore_state", str(path), stdout=out, **options)
    return out.getvalue()


def test_a_bundle_carries_a_versions_model_parameters_but_no_secret_among_them(tmp_path, server):
    ticket, version = a_ticket_on_a_version_with_secrets(server)

    path = export(tmp_path, ticket, include_personal_data=True)  # even to move a deployment

    data = bundle_bytes(path).decode()
    assert [secret for secret in (HEADER_KEY, BODY_KEY) if secret in data] == []
    profiles = [json.loads(line) for line in (path / "parts" / "agents.AgentProfile.jsonl").read_text().splitlines()]
    carried = {p["version"]: p["model_parameters"] for p in profiles}[version]
    assert carried["temperature"] == 0.2 and set(carried) == set(PARAMETERS)
    status, report = verify(path)
    assert status == 0 and f"v{version}: extra_body, extra_headers" in report, report


def test_a_restore_asks_for_the_withheld_values_and_the_restored_version_asks_the_model_with_them(tmp_path, server):
    ticket, version = a_ticket_on_a_version_with_secrets(server)
    path = export(tmp_path, ticket, include_personal_data=True)
    empty_the_ledger(restart_keys=False)

    with pytest.raises(CommandError) as refused:
        restore(path)

    said = str(refused.value)
    assert f"agent profile version {version}" in said and "extra_body, extra_headers" in said, said
    assert "--model-parameters" in said, said
    assert not Ticket.objects.exists() and not AgentProfile.objects.exists()  # nothing half-written

    values = tmp_path / "parameters.json"
    withheld = {"extra_headers": PARAMETERS["extra_headers"], "extra_body": PARAMETERS["extra_body"]}
    values.write_text(json.dumps({str(version): withheld}))
    restore(path, model_parameters=str(values))

    assert AgentRun.objects.get(ticket=ticket).profile.model_parameters == PARAMETERS
    assert verify(path, database=True)[0] == 0
    ticket_services.message_post(ticket=ticket, author_kind="customer", body="It is order A-1001")
    server.enqueue_text("Thank you, I am looking at it.")
    advance(ticket.pk)
    assert server.headers[-1].get("x-gateway-key") == HEADER_KEY
    assert server.requests[-1].get("api_key") == BODY_KEY

    again = restore(path, on_conflict="skip")  # restored twice: the version here is the bundle's
    assert f"Skipped, already here: #{ticket.pk}" in again, again
    assert AgentProfile.objects.get(version=version).model_parameters == PARAMETERS
