from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.utils import timezone

from tests.agents.openai_server import OpenAIServer


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    """A scripted OpenAI-compatible endpoint on loopback, one per test."""
    server = OpenAIServer().start()
    try:
        yield server
    finally:
        server.stop()


def retry_time_comes(ticket_id: int) -> None:
    """The backoff of the ticket's failed run is over, as when the retry the task scheduled comes
    (moved to now rather than slept through)."""
    from agents.models import AgentRun, RunStatus

    AgentRun.objects.filter(ticket_id=ticket_id, status=RunStatus.RUNNING).update(retry_not_before=timezone.now())
