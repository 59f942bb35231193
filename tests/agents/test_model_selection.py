"""AGENT_MODEL picks the adapter; the OpenAI-compatible one drives a whole turn over real HTTP."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ImproperlyConfigured

from agents.llm import ModelResponse
from agents.llm_openai import OpenAIChatModel
from agents.model_factory import get_model
from agents.models import CallStatus, ModelStep, ToolCall
from agents.offline_model import OfflineDeterministicModel
from agents.runner import advance
from tests.agents.conftest import retry_time_comes
from tests.agents.openai_server import OpenAIServer
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message


class EchoModel:
    """A user's own model class, selected by dotted path."""

    name = "echo"

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        return ModelResponse(text="echo: " + messages[-1]["content"])


class NotAModel:
    pass


def test_offline_is_the_default_model(settings):
    settings.AGENT_MODEL = "offline"
    assert isinstance(get_model(), OfflineDeterministicModel)


def test_a_dotted_path_selects_a_class_of_your_own(settings):
    settings.AGENT_MODEL = "tests.agents.test_model_selection.EchoModel"
    assert get_model().name == "echo"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tests.agents.test_model_selection.Missing", "not 'offline', 'openai:<model>' or an importable class"),
        ("tests.agents.test_model_selection.NotAModel", "does not implement agents.llm.ChatModel"),
        ("openai:", "needs a model name"),
    ],
)
def test_a_bad_model_setting_fails_with_a_clear_message(settings, spec, message):
    settings.AGENT_MODEL = spec
    with pytest.raises(ImproperlyConfigured, match=message):
        get_model()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("dialect", ["openai", "llama.cpp", "litellm"])
def test_a_turn_runs_through_an_openai_compatible_endpoint(settings, dialect):
    openai_server = OpenAIServer(dialect=dialect).start()
    settings.AGENT_MODEL = "openai:test-model"
    settings.OPENAI_BASE_URL = openai_server.url
    customer = make_customer()
    make_order(customer, number="O-5001")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Where", body="Where is O-5001?")
    openai_server.enqueue_tool_calls([("lookup_order", {"order_number": "O-5001"})])
    openai_server.enqueue_text("Your order O-5001 was delivered.")
    model = get_model()
    assert isinstance(model, OpenAIChatModel)

    try:
        advance(ticket.pk, model=model)
    finally:
        openai_server.stop()

    call = ToolCall.objects.get(ticket=ticket)
    assert (call.name, call.status) == ("lookup_order", CallStatus.SUCCEEDED)
    reply = Message.objects.get(ticket=ticket, author_kind=AuthorKind.AGENT)
    assert reply.body == "Your order O-5001 was delivered."
    second_request = openai_server.requests[1]
    tool_message = next(m for m in second_request["messages"] if m["role"] == "tool")
    assert json.loads(tool_message["content"])["order_number"] == "O-5001"
    assert {t["function"]["name"] for t in second_request["tools"]} >= {"lookup_order", "issue_refund"}
    steps = list(ModelStep.objects.filter(ticket=ticket))
    assert [s.model_name for s in steps] == ["openai:test-model"] * 2
    # A server that reports no usage still advances the token budget, with estimates marked as such.
    assert all(s.usage_estimated == (dialect == "llama.cpp") for s in steps)
    assert all(s.prompt_tokens > 0 and s.completion_tokens > 0 for s in steps)


class FailingModel:
    name = "failing"

    def __init__(self, *, retryable: bool) -> None:
        self.retryable = retryable
        self.calls = 0

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        from agents.llm import ModelError

        self.calls += 1
        raise ModelError("upstream is down", retryable=self.retryable, status_code=503 if self.retryable else 400)


@pytest.mark.django_db(transaction=True)
def test_a_model_outage_is_retried_later_then_handed_to_a_person(settings):
    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    settings.AGENT_OUTAGE_PATIENCE_SECONDS = (
        0  # an outage counted as any failure (tests/agents/test_outage_patience.py)
    )
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Hi", body="Hello?")
    model = FailingModel(retryable=True)

    first = advance(ticket.pk, model=model)
    retry_time_comes(ticket.pk)
    second = advance(ticket.pk, model=model)
    retry_time_comes(ticket.pk)
    third = advance(ticket.pk, model=model)

    assert (first.state, second.state) == ("retry", "retry")
    # Exponential backoff with jitter, scheduled by the task.
    assert 1.0 <= first.retry_in <= 2.0 and 2.0 <= second.retry_in <= 4.0
    assert third.state == "parked"
    ticket.refresh_from_db()
    assert ticket.status == "with_human"
    assert "the model could not answer: upstream is down" in Message.objects.get(ticket=ticket, is_public=False).body
    assert ModelStep.objects.filter(ticket=ticket, status="failed").count() == 3


@pytest.mark.django_db(transaction=True)
def test_a_model_refusing_the_request_hands_off_at_once():
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Hi", body="Hello?")

    outcome = advance(ticket.pk, model=FailingModel(retryable=False))

    assert outcome.state == "parked"
    assert ModelStep.objects.filter(ticket=ticket, status="failed").count() == 1
