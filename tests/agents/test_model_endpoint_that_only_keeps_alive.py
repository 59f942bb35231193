"""A model endpoint that keeps its connection alive without answering is stopped at the step's time.

AGENT_MODEL_STEP_SECONDS was checked only when a chunk arrived. A server that sends nothing but
SSE keep-alive comments (``: ping``, as proxies do while an upstream model queues), or its response
headers a line at a time, never hands the adapter a chunk, and each of its writes comes well
within the read timeout: the worker read on (its heartbeat keeping the ticket's lease) until the
task's time limit, ten minutes a try, or forever under a pool without one. Now every read and
write on the model's connection ends with the step, and the step fails there like any other.
"""

from __future__ import annotations

import time

import pytest

from agents.llm import ModelError
from agents.llm_openai import OpenAIChatModel
from agents.models import AgentRun, ModelStep, RunStatus, StepStatus
from agents.runner import advance
from tests.agents.conftest import retry_time_comes
from tests.agents.openai_server import _Handler, serving
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import TicketStatus

MESSAGES = [{"role": "user", "content": "Where is my order A-1001?"}]


class _KeepsAlive(_Handler):
    """Answers 200 and an event stream, then only keep-alive comments, one every ``pause`` s."""

    pause = 0.2

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._start_stream()
        try:
            for _ in range(600):
                comment = b": keep-alive\n\n"
                self.wfile.write(f"{len(comment):x}\r\n".encode() + comment + b"\r\n")
                self.wfile.flush()
                time.sleep(self.pause)
        except OSError:
            pass  # the client hung up
        self.close_connection = True


class _TricklesHeaders(_Handler):
    """Sends its status line, then one header line every ``pause`` s, never the end of the headers."""

    pause = 0.2

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            for n in range(600):
                self.wfile.write(f"X-Still-Thinking: {n}\r\n".encode())
                self.wfile.flush()
                time.sleep(self.pause)
        except OSError:
            pass
        self.close_connection = True


def adapter(url: str) -> OpenAIChatModel:
    # A read timeout far above the step's time: each keep-alive resets it.
    return OpenAIChatModel(model="m", api_key="k", base_url=url, timeout=30, max_retries=0)


@pytest.mark.parametrize("handler", [_KeepsAlive, _TricklesHeaders], ids=["keep-alive comments", "trickled headers"])
def test_an_endpoint_that_keeps_the_connection_alive_without_a_chunk_is_stopped_at_the_step_time(handler, settings):
    settings.AGENT_MODEL_STEP_SECONDS = 1
    with serving(handler) as url:
        began = time.monotonic()
        with pytest.raises(ModelError, match=r"after 1 s \(AGENT_MODEL_STEP_SECONDS\)") as raised:
            adapter(url).complete(messages=MESSAGES, tools=[])
        took = time.monotonic() - began

    assert took < 10, f"the step went on for {took:.1f} s past its 1 s"  # 30 s (its read timeout) before
    assert raised.value.retryable


def test_the_step_time_is_the_models_own_and_ends_with_its_call(settings, openai_server):
    settings.AGENT_MODEL_STEP_SECONDS = 1
    openai_server.enqueue_text("Hello.")
    openai_server.enqueue_text("Hello again.")
    model = OpenAIChatModel(model="m", api_key="k", base_url=openai_server.url, timeout=5, max_retries=0)

    assert model.complete(messages=MESSAGES, tools=[]).text == "Hello."
    time.sleep(1.2)  # past the first call's step time: the kept connection serves the next call
    assert model.complete(messages=MESSAGES, tools=[]).text == "Hello again."


@pytest.mark.django_db(transaction=True)
def test_a_ticket_whose_model_only_keeps_alive_is_retried_then_parked_without_holding_a_worker(settings):
    settings.AGENT_MODEL_STEP_SECONDS = 1
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Where is my order?")

    states, longest = [], 0.0
    with serving(_KeepsAlive) as url:
        model = OpenAIChatModel(model="m", api_key="k", base_url=url, timeout=30, max_retries=1)
        for _ in range(3):
            began = time.monotonic()
            states.append(advance(ticket.pk, model=model).state)
            longest = max(longest, time.monotonic() - began)
            retry_time_comes(ticket.pk)

    assert states == ["retry", "retry", "parked"]
    assert longest < 8, f"a pass held its worker {longest:.1f} s on a 1 s model step"
    failed = ModelStep.objects.filter(ticket=ticket, status=StepStatus.FAILED)
    assert failed.count() == 3
    assert all("AGENT_MODEL_STEP_SECONDS" in step.error for step in failed)
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.FAILED
