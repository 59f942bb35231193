"""A profile version's model parameters are ones an OpenAI-compatible request can carry, in range.

The admin took any object of parameters for an ``openai:`` model, and every run on the version sent
them with each request: a server's own parameter written at the top level (``top_k``, as vLLM and
llama.cpp name it) is refused by the SDK before anything is sent (``TypeError``), a temperature of 5
or a ``max_tokens`` of 0 by every OpenAI-compatible endpoint, so each step of each new ticket failed
and every customer ended parked with a person; ``n`` above 1 asks for several answers at once, which
the agent reads as one (their words and tool calls mixed). Each is now refused on the page, naming
the parameter, and no version is made. A server's own parameter goes under ``extra_body``.
"""

from __future__ import annotations

import json

import pytest

from agents.models import AgentProfile
from agents.profiles import active_profile, content_problems
from agents.runner import advance
from tests.agents.openai_server import OpenAIServer
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Message

pytestmark = pytest.mark.django_db(transaction=True)


def _save(admin_client, parameters):  # noqa: ANN001, ANN202
    before = active_profile()
    page = admin_client.get(f"/admin/agents/agentprofile/{before.pk}/change/")
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in ["system_prompt", "tools", "approval_policy"]}
    data.update(model="openai:test-model", model_parameters=json.dumps(parameters), note="params", make_active="on")
    return before, admin_client.post(f"/admin/agents/agentprofile/{before.pk}/change/", data)


@pytest.mark.parametrize(
    ("parameters", "named"),
    [
        ({"top_k": 40}, "top_k"),
        ({"temperature": 5}, "temperature"),
        ({"temperature": "warm"}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_completion_tokens": 2.5}, "max_completion_tokens"),
        ({"presence_penalty": -3}, "presence_penalty"),
        ({"n": 2}, "n"),
        ({"timeout": 0.01}, "timeout"),
    ],
    ids=["a-servers-own-name", "temperature-5", "temperature-text", "top_p-1.5", "max_tokens-0",
         "max_completion_tokens-fraction", "presence_penalty-minus-3", "n-2", "timeout"],
)  # fmt: skip
def test_a_parameter_no_request_can_carry_is_refused_on_the_page_naming_it(admin_client, parameters, named):  # noqa: ANN001
    before, response = _save(admin_client, parameters)

    assert response.status_code == 200, (
        f"the admin saved model parameters {parameters} for openai:test-model as a new active version "
        f"(status {response.status_code}); every request of every run on it would carry them"
    )
    errors = response.context["adminform"].form.errors.get("model_parameters")
    assert errors and named in str(errors), response.context["adminform"].form.errors
    assert AgentProfile.objects.count() == 1 and active_profile().version == before.version
    # A bundle's version is checked the same way on restore.
    content = {"system_prompt": "", "model": "openai:test-model", "model_parameters": parameters,
               "tools": before.tools, "approval_policy": before.approval_policy}  # fmt: skip
    assert any(named in problem for problem in content_problems(content)), content_problems(content)


def test_parameters_in_range_and_a_servers_own_under_extra_body_are_saved_and_sent(admin_client, settings):  # noqa: ANN001
    parameters = {"temperature": 2, "top_p": 0, "max_tokens": 300, "n": 1, "extra_body": {"top_k": 40}}
    before, response = _save(admin_client, parameters)
    assert response.status_code == 302, response.context["adminform"].form.errors if response.context else response
    assert active_profile().version == before.version + 1

    server = OpenAIServer().start()
    settings.OPENAI_BASE_URL = server.url
    try:
        ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Hello", body="Hello there")
        server.enqueue_text("Hello! How can I help?")
        advance(ticket.pk)
    finally:
        server.stop()

    assert [{k: r.get(k) for k in ("temperature", "top_p", "max_tokens", "top_k")} for r in server.requests] == [
        {"temperature": 2, "top_p": 0, "max_tokens": 300, "top_k": 40}
    ]
    assert Message.objects.filter(ticket=ticket, author_kind="agent", body="Hello! How can I help?").exists()
