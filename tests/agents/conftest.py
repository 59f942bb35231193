from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.agents.openai_server import OpenAIServer


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    """A scripted OpenAI-compatible endpoint on loopback, one per test."""
    server = OpenAIServer().start()
    try:
        yield server
    finally:
        server.stop()


def while_tool_runs(monkeypatch: pytest.MonkeyPatch, name: str, action: Callable[[], object]) -> None:
    """``action`` runs once, inside the tool's handler, before the tool's own work (a write that
    lands after the pass's last commit, while a call runs)."""
    import dataclasses

    from agents.tools import REGISTRY

    tool, done = REGISTRY[name], []

    def handler(ctx, args):  # noqa: ANN001, ANN202
        if not done:
            done.append(True)
            action()
        return tool.handler(ctx, args)

    monkeypatch.setitem(REGISTRY, name, dataclasses.replace(tool, handler=handler))


class CallsThenReplies:
    """A scripted model: asks for ``tools`` (no arguments) in one step, then, once any result is in
    the conversation, replies ``reply``."""

    name = "calls-then-replies"

    def __init__(self, *tools: str, reply: str = "Done.") -> None:
        self.tools, self.reply = tools, reply

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN201
        from agents.llm import ModelResponse, ToolCallRequest, Usage

        if any(m["role"] == "tool" for m in messages):
            return ModelResponse(text=self.reply)
        calls = [ToolCallRequest(f"c{i}", name, "{}") for i, name in enumerate(self.tools)]
        return ModelResponse(text="", tool_calls=calls, usage=Usage(10, 5), finish_reason="tool_calls")


def retry_time_comes(ticket_id: int) -> None:
    """The backoff of the ticket's failed run, or of its failed start, is over, as when the retry
    the task scheduled comes (moved to now rather than slept through)."""
    from django.db import connection
    from django.db.models.functions import Now

    from agents.models import ACTIVE_RUN_STATUSES, AgentRun

    AgentRun.objects.filter(ticket_id=ticket_id, status__in=ACTIVE_RUN_STATUSES).update(retry_not_before=Now())
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE tickets_ticketevent SET payload = jsonb_set(payload, '{retry_not_before}', to_jsonb(now())) "
            "WHERE ticket_id = %s AND kind = %s AND payload ? 'retry_not_before'",
            [ticket_id, "agent_run_start_failed"],
        )


@pytest.fixture
def quick_provider_retries(settings):  # noqa: ANN001, ANN201
    """The refund's retries to the provider wait milliseconds, not seconds (returns the settings)."""
    settings.REFUND_RETRY_FIRST_WAIT_MS = 5
    settings.REFUND_RETRY_MAX_WAIT_MS = 20
    return settings


@pytest.fixture
def person(db):  # noqa: ANN001, ANN201
    """A staff member who answers customers and takes tickets over, without the right to decide approvals."""
    from tests.approvals.conftest import make_staff

    return make_staff("ticket-person", can_decide=False)


class WorkerDied(BaseException):
    """Stands in for SIGKILL (the OOM killer, a segfault in a C extension): nothing after it runs in
    this worker, not even its ``finally`` blocks' lease release."""


def rung_again_and_again(ticket_id: int, model, *, rings: int, before_each=None, until_settled: bool = False) -> int:  # noqa: ANN001
    """The sweeper rings the ticket ``rings`` times, each ring taken by the next worker (which takes a
    dead one's lease over); a retry's backoff is over at the next ring. ``until_settled``: stop at the
    first ring that ends neither dead, busy nor retrying. Returns how many workers died."""
    from agents.runner import advance

    deaths = 0
    for _ in range(rings):
        if before_each is not None:
            before_each()
        try:
            outcome = advance(ticket_id, model=model)
        except WorkerDied:
            deaths += 1
            continue
        if outcome.state == "retry":
            retry_time_comes(ticket_id)
        elif until_settled and outcome.state != "busy":
            break
    return deaths
