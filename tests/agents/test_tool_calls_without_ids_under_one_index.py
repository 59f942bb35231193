"""Several tool calls of one answer streamed under one index and without ids are several calls.

Ollama streams every call of an answer under ``index`` 0, told apart by its id; a server (or a gateway
in front of one) that sends the calls the same way but without ids ran them together: one call with
the first's name and both arguments (``{...}{...}``), refused as not JSON every time the model asked,
and the second call lost. A call named after the arguments before it are a whole JSON object begins
another call; a server that repeats the name in every delta of one call (llama.cpp's) still makes one.
"""

from __future__ import annotations

import json

import pytest

from agents.llm_openai import OpenAIChatModel
from tests.agents.openai_server import _Chunks, _Handler, serving

CALLS = [("lookup_order", {"order_number": "A-1001"}), ("search_help", {"query": "late delivery"})]


def _delta(name: str | None, arguments: str) -> dict:
    function = {"arguments": arguments} if name is None else {"name": name, "arguments": arguments}
    return {"tool_calls": [{"index": 0, "type": "function", "function": function}]}


def whole(calls):  # noqa: ANN001, ANN201
    """Each call whole in one delta."""
    return [_delta(name, json.dumps(args)) for name, args in calls]


def in_pieces(calls):  # noqa: ANN001, ANN201
    """Each call named in its first delta, its arguments in pieces after."""
    deltas = []
    for name, args in calls:
        text = json.dumps(args)
        deltas.append(_delta(name, ""))
        deltas += [_delta(None, text[i : i + 5]) for i in range(0, len(text), 5)]
    return deltas


def name_repeated(calls):  # noqa: ANN001, ANN201
    """One call, its name again in every delta (llama.cpp's habit, here without ids), and at the end."""
    ((name, args),) = calls
    text = json.dumps(args)
    return [_delta(name, text[i : i + 5]) for i in range(0, len(text), 5)] + [_delta(name, "")]


def _serve(deltas: list[dict]):  # noqa: ANN202
    class Handler(_Handler):
        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            self._start_stream()
            chunks = _Chunks(body, include_usage=True)
            for delta in deltas:
                self._send_event(json.dumps(chunks.chunk(delta)))
            self._send_event(json.dumps(chunks.chunk({}, finish_reason="tool_calls")))
            self._send_event("[DONE]")
            self._end_stream()

    return serving(Handler)


def ask(deltas: list[dict]):  # noqa: ANN201
    with _serve(deltas) as url:
        model = OpenAIChatModel(model="gpt-test", api_key="k", base_url=url, max_retries=0, timeout=5)
        return model.complete(messages=[{"role": "user", "content": "Where is A-1001?"}], tools=[])


@pytest.mark.parametrize("shape", [whole, in_pieces], ids=["whole", "in-pieces"])
def test_calls_without_ids_under_one_index_are_each_their_own_call(shape):  # noqa: ANN001
    response = ask(shape(CALLS))

    got = [(call.name, json.loads(call.arguments)) for call in response.tool_calls]
    assert got == CALLS
    assert len({call.id for call in response.tool_calls}) == 2


def test_a_call_whose_name_comes_again_in_every_delta_is_one_call():
    response = ask(name_repeated(CALLS[:1]))

    assert [(call.name, json.loads(call.arguments)) for call in response.tool_calls] == CALLS[:1]
