from __future__ import annotations

from collections.abc import Iterator

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
