"""A reasoning model served without a reasoning parser writes its thinking into the answer's text.

DeepSeek-R1 and Qwen3 behind vLLM, SGLang, llama.cpp's server or older Ollama send
``<think>...</think>`` at the head of ``content``, then the answer. The customer reads the answer
only: neither streamed to their page nor posted is the model's deliberation about them.
"""

from __future__ import annotations

import json

import pytest

from agents.llm_openai import OpenAIChatModel
from agents.runner import advance
from tests.agents.openai_server import _Chunks, _Handler, serving
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = pytest.mark.django_db(transaction=True)

THOUGHT = "The customer sounds angry; I should not offer a refund unless they insist."
ANSWER = "Your order A-1001 was shipped yesterday and should arrive on Friday."
# As such servers stream it: the tags themselves cut over pieces, a blank line before the answer.
PIECES = ["<th", "ink>", *THOUGHT.split(" "), "</", "think>", "\n\n", *[w + " " for w in ANSWER.split(" ")]]


class _ThinksAloud(_Handler):
    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self._start_stream()
        chunks = _Chunks(body, include_usage=True)
        for piece in PIECES:
            self._send_event(json.dumps(chunks.chunk({"content": piece})))
        self._send_event(json.dumps(chunks.chunk({}, finish_reason="stop")))
        self._send_event("[DONE]")
        self._end_stream()


@pytest.fixture
def model():
    with serving(_ThinksAloud) as url:
        yield OpenAIChatModel(model="r1-test", api_key="k", base_url=url, max_retries=0, timeout=5)


def test_the_models_reasoning_is_neither_streamed_nor_part_of_the_answer(model):
    streamed: list[str] = []

    response = model.complete(
        messages=[{"role": "user", "content": "Where is A-1001?"}], tools=[], on_token=streamed.append
    )

    assert response.text.strip() == ANSWER
    assert "think" not in "".join(streamed) and "angry" not in "".join(streamed), streamed
    assert "".join(streamed).strip() == ANSWER


def test_the_customer_is_posted_the_answer_without_the_models_reasoning(model):
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Order", body="Where is A-1001?")

    advance(ticket.pk, model=model)

    (reply,) = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).values_list("body", flat=True)
    assert reply.strip() == ANSWER, reply


class _ThinksAloudWithoutOpening(_Handler):
    """As DeepSeek-R1's distilled models behind vLLM answer: the chat template opens ``<think>`` in the
    prompt, so the answer begins with the reasoning itself and only closes the tag."""

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self._start_stream()
        chunks = _Chunks(body, include_usage=True)
        for piece in [*[w + " " for w in THOUGHT.split(" ")], "\n</think>", "\n\n", ANSWER]:
            self._send_event(json.dumps(chunks.chunk({"content": piece})))
        self._send_event(json.dumps(chunks.chunk({}, finish_reason="stop")))
        self._send_event("[DONE]")
        self._end_stream()


def test_reasoning_whose_opening_tag_was_in_the_prompt_is_not_posted():
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Order", body="Where is A-1001?")

    with serving(_ThinksAloudWithoutOpening) as url:
        advance(ticket.pk, model=OpenAIChatModel(model="r1", api_key="k", base_url=url, max_retries=0, timeout=5))

    (reply,) = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).values_list("body", flat=True)
    assert reply.strip() == ANSWER, reply


def test_reasoning_whose_opening_tag_was_in_the_prompt_is_not_streamed_to_the_customer(settings):  # noqa: ANN001
    # The operator says the model writes reasoning with no opening tag (AGENT_MODEL_REASONING_UNOPENED).
    settings.AGENT_MODEL_REASONING_UNOPENED = True
    streamed: list[str] = []

    with serving(_ThinksAloudWithoutOpening) as url:
        model = OpenAIChatModel(model="r1", api_key="k", base_url=url, max_retries=0, timeout=5)
        response = model.complete(
            messages=[{"role": "user", "content": "Where is A-1001?"}], tools=[], on_token=streamed.append
        )

    assert response.text.strip() == ANSWER
    assert "think" not in "".join(streamed) and "angry" not in "".join(streamed), streamed
    assert "".join(streamed).strip() == ANSWER


class _AnswersPlainly(_Handler):
    """A model that does not reason in its text: its answer, word by word, with nothing held back for long."""

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self._start_stream()
        chunks = _Chunks(body, include_usage=True)
        for piece in [w + " " for w in ANSWER.split(" ")]:
            self._send_event(json.dumps(chunks.chunk({"content": piece})))
        self._send_event(json.dumps(chunks.chunk({}, finish_reason="stop")))
        self._send_event("[DONE]")
        self._end_stream()


@pytest.mark.parametrize("unopened", [False, True], ids=["streamed", "held-for-unopened-reasoning"])
def test_an_answer_without_reasoning_reaches_the_customer_whole(settings, unopened):  # noqa: ANN001
    settings.AGENT_MODEL_REASONING_UNOPENED = unopened
    streamed: list[str] = []

    with serving(_AnswersPlainly) as url:
        model = OpenAIChatModel(model="plain", api_key="k", base_url=url, max_retries=0, timeout=5)
        response = model.complete(
            messages=[{"role": "user", "content": "Where is A-1001?"}], tools=[], on_token=streamed.append
        )

    assert response.text.strip() == ANSWER
    assert "".join(streamed).strip() == ANSWER
    if not unopened:  # a model that writes no untagged reasoning: its answer streams word by word
        assert streamed == [w + " " for w in ANSWER.split(" ")], "the answer was held back"


def test_reasoning_with_no_opening_tag_streams_until_its_tag_but_is_not_posted_by_default():
    """What ``AGENT_MODEL_REASONING_UNOPENED`` is for: off (every answer streamed word by word), such
    reasoning shows on the page until its closing tag; the reply stored and posted is the answer alone."""
    streamed: list[str] = []

    with serving(_ThinksAloudWithoutOpening) as url:
        model = OpenAIChatModel(model="r1", api_key="k", base_url=url, max_retries=0, timeout=5)
        response = model.complete(
            messages=[{"role": "user", "content": "Where is A-1001?"}], tools=[], on_token=streamed.append
        )

    assert response.text.strip() == ANSWER
    assert "angry" in "".join(streamed)


class _ReasonsApart(_Handler):
    """A server with a reasoning parser (vLLM's, SGLang's, DeepSeek's API): the reasoning comes in
    ``reasoning_content``, the answer alone in ``content``."""

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self._start_stream()
        chunks = _Chunks(body, include_usage=True)
        for word in THOUGHT.split(" "):
            self._send_event(json.dumps(chunks.chunk({"reasoning_content": word + " "})))
        for piece in [w + " " for w in ANSWER.split(" ")]:
            self._send_event(json.dumps(chunks.chunk({"content": piece})))
        self._send_event(json.dumps(chunks.chunk({}, finish_reason="stop")))
        self._send_event("[DONE]")
        self._end_stream()


def test_an_answer_apart_from_the_reasoning_streams_as_it_is_written_without_the_reasoning():
    streamed: list[str] = []

    with serving(_ReasonsApart) as url:
        model = OpenAIChatModel(model="r1", api_key="k", base_url=url, max_retries=0, timeout=5)
        response = model.complete(
            messages=[{"role": "user", "content": "Where is A-1001?"}], tools=[], on_token=streamed.append
        )

    assert response.text.strip() == ANSWER
    assert "angry" not in "".join(streamed)
    assert streamed == [w + " " for w in ANSWER.split(" ")], "the answer was held back though it was known"


class _ThinksAfterAWord(_Handler):
    """A model that opens its reasoning after a first word of its answer."""

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self._start_stream()
        chunks = _Chunks(body, include_usage=True)
        for piece in ["Sure. ", "<think>", THOUGHT, "</think>", "\n\n", ANSWER]:
            self._send_event(json.dumps(chunks.chunk({"content": piece})))
        self._send_event(json.dumps(chunks.chunk({}, finish_reason="stop")))
        self._send_event("[DONE]")
        self._end_stream()


def test_the_words_before_reasoning_opened_mid_answer_are_kept_and_the_reasoning_left_out():
    streamed: list[str] = []

    with serving(_ThinksAfterAWord) as url:
        model = OpenAIChatModel(model="r1", api_key="k", base_url=url, max_retries=0, timeout=5)
        response = model.complete(
            messages=[{"role": "user", "content": "Where is A-1001?"}], tools=[], on_token=streamed.append
        )

    assert response.text == "Sure. " + ANSWER
    assert "".join(streamed) == "Sure. " + ANSWER
