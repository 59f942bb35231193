"""A run's model is asked with the model parameters of the profile version the run is pinned to.

A version holds the model's name and its parameters (temperature and the like); the name chose the
adapter, but the parameters were stored and never sent: every run was asked with the server's defaults,
whatever its version said.
"""

from __future__ import annotations

import pytest

from agents.llm import ModelResponse
from agents.models import AgentProfile
from agents.profiles import active_profile, profile_new_version
from agents.runner import advance
from tests.agents.openai_server import OpenAIServer
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Message

pytestmark = pytest.mark.django_db(transaction=True)


def test_each_run_sends_the_model_parameters_of_its_own_profile_version(settings):
    server = OpenAIServer().start()
    settings.OPENAI_BASE_URL = server.url
    try:
        pinned = {"temperature": 0.25, "top_p": 0.5}
        profile_new_version(changes={"model": "openai:test-model", "model_parameters": pinned}, user=None)
        first, _ = ticket_services.ticket_open(customer=make_customer(), subject="Hello", body="Hello there")
        server.enqueue_text("Hello! How can I help?")
        advance(first.pk)
        profile_new_version(changes={"model_parameters": {"temperature": 0.9}}, user=None)
        second, _ = ticket_services.ticket_open(customer=make_customer(), subject="Hello", body="Hello again")
        server.enqueue_text("Hello! How can I help?")
        advance(second.pk)
    finally:
        server.stop()

    sent = [{k: r.get(k) for k in ("model", "temperature", "top_p", "stream")} for r in server.requests]
    assert sent == [
        {"model": "test-model", "temperature": 0.25, "top_p": 0.5, "stream": True},
        {"model": "test-model", "temperature": 0.9, "top_p": None, "stream": True},
    ]


@pytest.mark.parametrize(
    "parameters", ['["temperature", 0.2]', '"hot"', '{"stream": false}', '{"messages": []}'],
    ids=["a list", "a string", "the stream switch", "the messages"],
)  # fmt: skip
def test_model_parameters_that_are_not_an_object_of_parameters_are_a_form_error(admin_client, parameters):  # noqa: ANN001
    """Sent with every request of the runs on the version: a list, or the request's own keys, would fail
    (or silently change) each of them in the worker."""
    before = active_profile()
    page = admin_client.get(f"/admin/agents/agentprofile/{before.pk}/change/")
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in ["system_prompt", "model", "tools", "approval_policy"]}
    data.update(model_parameters=parameters, note="parameters", make_active="on")

    response = admin_client.post(f"/admin/agents/agentprofile/{before.pk}/change/", data)

    assert response.status_code == 200 and response.context["adminform"].form.errors.get("model_parameters")
    assert AgentProfile.objects.count() == 1 and active_profile().version == before.version


class ParameterisedModel:
    """A model class of a deployment's own, named by a profile version: told its version's parameters."""

    name = "parameterised"

    def __init__(self, *, parameters: dict | None = None) -> None:
        self.parameters = parameters or {}

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        return ModelResponse(text=f"Answered at temperature {self.parameters.get('temperature', 'default')}.")


class ModelWithoutParameters:
    """A model class built with no arguments, as every one was before profile parameters."""

    name = "without-parameters"

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        return ModelResponse(text="Answered.")


OWN_CLASS = "tests.agents.test_profile_model_parameters.ParameterisedModel"


def test_a_model_class_of_ones_own_is_built_with_the_parameters_of_the_runs_version():
    profile_new_version(changes={"model": OWN_CLASS, "model_parameters": {"temperature": 0.25}}, user=None)
    first, _ = ticket_services.ticket_open(customer=make_customer(), subject="Hello", body="Hello there")
    advance(first.pk)
    profile_new_version(changes={"model_parameters": {"temperature": 0.9}}, user=None)
    second, _ = ticket_services.ticket_open(customer=make_customer(), subject="Hello", body="Hello again")
    advance(second.pk)

    said = [
        list(Message.objects.filter(ticket=t, author_kind="agent").values_list("body", flat=True))
        for t in (first, second)
    ]
    assert said == [["Answered at temperature 0.25."], ["Answered at temperature 0.9."]]


def test_a_model_class_that_takes_no_parameters_is_refused_with_parameters_in_the_admin(admin_client):
    """Saved, every run on the version would fail to build its model in the worker."""
    before = active_profile()
    page = admin_client.get(f"/admin/agents/agentprofile/{before.pk}/change/")
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in ["system_prompt", "tools", "approval_policy"]}
    data.update(
        model="tests.agents.test_profile_model_parameters.ModelWithoutParameters",
        model_parameters='{"temperature": 0.2}',
        note="own class",
        make_active="on",
    )

    response = admin_client.post(f"/admin/agents/agentprofile/{before.pk}/change/", data)

    assert response.status_code == 200, response.status_code
    errors = response.context["adminform"].form.errors
    assert "parameters" in str(errors), errors
    assert AgentProfile.objects.count() == 1 and active_profile().version == before.version
