"""A model call that never returns is given up at AGENT_MODEL_STEP_SECONDS, counted, and parked.

The step's time limit was enforced only as the answer streamed (on each piece of text) and, for the
OpenAI-compatible adapter, on its socket reads. A model of the deployment's own (AGENT_MODEL as a
dotted path) whose call blocked without streaming anything (a client with no timeout, a lock) held
the pass for ever: its lease ran out at the task's time limit, the next worker took the ticket over
and blocked on the same call, and so on, each worker held for good under a pool that kills nothing
(solo, threads). Seen with three such workers: all three held, the run still running, nothing
recorded, the customer unanswered. The call is now waited for at most the step's time: past it the
step fails (counted like any failed step), and after the failures in a row the ticket is parked
with a person.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from agents.llm import ModelResponse, Usage
from agents.models import ModelStep, StepStatus
from agents.offline_model import OfflineDeterministicModel
from tests.agents.test_poison import assert_parked, drive_until_at_rest, open_ticket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


class Silent:
    """Answers nothing and streams nothing until the test lets it go."""

    name = "silent"

    def __init__(self) -> None:
        self.calls = 0
        self.release = threading.Event()

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN201
        self.calls += 1
        self.release.wait(90)
        return ModelResponse(text="An answer no one waited for.", usage=Usage(5, 5))


def test_a_model_call_that_never_returns_is_given_up_at_the_steps_time_and_the_ticket_parked(settings):
    settings.AGENT_MODEL_STEP_SECONDS = 1
    ticket = open_ticket("Where is my order?")
    model = Silent()
    done: dict = {}

    def worker() -> None:
        try:
            done["states"] = drive_until_at_rest(ticket, model)
        finally:
            connection.close()

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    thread.join(45)
    held = thread.is_alive()
    model.release.set()
    thread.join(30)

    assert not held, "the pass waited on a model call that never returned"
    assert done["states"] == ["retry", "retry", "parked"]
    assert_parked(ticket, model, error="AGENT_MODEL_STEP_SECONDS")
    failed = ModelStep.objects.filter(ticket=ticket, status=StepStatus.FAILED)
    assert failed.count() == 3
    # Nothing of the late answers is posted (assert_parked: the customer read only the parking note).


class Quick:
    """A model of the deployment's own that answers at once."""

    name = "quick"

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN201
        self.threads.append(threading.current_thread())
        return ModelResponse(text="Here is your answer.", usage=Usage(5, 5))


class OfflineInThread(OfflineDeterministicModel):
    def __init__(self) -> None:
        super().__init__(token_delay_ms=0)
        self.threads: list[threading.Thread] = []

    def complete(self, **kwargs):  # noqa: ANN003, ANN201
        self.threads.append(threading.current_thread())
        return super().complete(**kwargs)


@pytest.mark.parametrize(("model_class", "watched"), [(Quick, True), (OfflineInThread, False)])
def test_only_a_model_that_does_not_end_its_own_calls_is_watched_from_another_thread(model_class, watched):
    # The product's own models (the offline one, the OpenAI-compatible adapter) end their calls at the
    # step's deadline themselves: a thread more per step would cost every turn its start and hand-off.
    ticket = open_ticket("Where is my order?")
    model = model_class()

    assert drive_until_at_rest(ticket, model)[-1] == "completed"
    assert model.threads
    assert all((thread is not threading.current_thread()) is watched for thread in model.threads)
