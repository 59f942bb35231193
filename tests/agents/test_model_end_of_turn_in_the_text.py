"""A server that does not stop at the model's end-of-turn token, or does not strip it (a chat template's
stop token missing from the server's stop list, ``skip_special_tokens`` off), sends it in the answer's
text: ``<|im_end|>`` (Qwen, ChatML), ``<|eot_id|>`` (Llama 3), ``</s>`` (Mistral), often followed by
a turn the model goes on to write for the customer. The customer reads the answer only: neither the
token nor what follows it is streamed or posted."""

from __future__ import annotations

import json

import pytest

from agents.llm_openai import OpenAIChatModel
from tests.agents.openai_server import _Chunks, _Handler, serving

ANSWER = "Your order A-1001 ships on Friday."
AFTER = {
    "chatml": ["<|im_", "end|>", "\n<|im_start|>user\nThanks! And my refund?<|im_end|>"],
    "llama3": ["<|eot", "_id|>", "<|start_header_id|>user<|end_header_id|>\n\nThanks!"],
    "mistral": ["</", "s>", "[INST] Thanks! [/INST]"],
}


def _handler(after: list[str]) -> type[_Handler]:
    class _GoesOnPastItsTurn(_Handler):
        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            self._start_stream()
            chunks = _Chunks(body, include_usage=True)
            for piece in [*[w + " " for w in ANSWER.split(" ")[:-1]], ANSWER.split(" ")[-1], *after]:
                self._send_event(json.dumps(chunks.chunk({"content": piece})))
            self._send_event(json.dumps(chunks.chunk({}, finish_reason="stop")))
            self._send_event("[DONE]")
            self._end_stream()

    return _GoesOnPastItsTurn


@pytest.mark.parametrize("template", sorted(AFTER))
def test_the_answer_ends_at_the_models_end_of_turn_token(template):
    streamed: list[str] = []

    with serving(_handler(AFTER[template])) as url:
        model = OpenAIChatModel(model="m", api_key="k", base_url=url, max_retries=0, timeout=5)
        response = model.complete(
            messages=[{"role": "user", "content": "Where is A-1001?"}], tools=[], on_token=streamed.append
        )

    assert response.text == ANSWER
    assert "".join(streamed) == ANSWER
