"""The OpenAI-compatible adapter, over real HTTP against a scripted local endpoint.

Nothing is patched: the real SDK talks to tests/agents/openai_server.py on
loopback, so retries, Retry-After, chunked SSE and broken connections are the
real thing.
"""

from __future__ import annotations

import json

import pytest

from agents.llm import ChatModel, ModelError, ModelOutputInvalid, ToolCallRequest, Usage
from agents.llm_openai import OpenAIChatModel
from agents.model_factory import get_model
from tests.agents.openai_server import OpenAIServer, split_text

LOOKUP_ORDER_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look up one of the customer's orders by its number.",
        "parameters": {
            "type": "object",
            "properties": {"order_number": {"type": "string"}},
            "required": ["order_number"],
        },
    },
}
MESSAGES = [
    {"role": "system", "content": "You are a support agent."},
    {"role": "user", "content": "Where is my order A-1001?"},
]


def make_model(server: OpenAIServer, **kwargs: object) -> OpenAIChatModel:
    options: dict[str, object] = {"model": "test-model", "api_key": "sk-test", "base_url": server.url, "timeout": 5.0}
    options.update(kwargs)
    return OpenAIChatModel(**options)  # type: ignore[arg-type]


def test_streamed_text_arrives_through_on_token_in_order_and_makes_up_the_reply(openai_server):
    text = "Your order A-1001 left our warehouse yesterday and should arrive on Friday."
    openai_server.enqueue_text(text)
    tokens: list[str] = []

    response = make_model(openai_server).complete(messages=MESSAGES, tools=[], on_token=tokens.append)

    assert tokens == split_text(text)
    assert len(tokens) > 1
    assert response.text == "".join(tokens) == text
    assert response.tool_calls == []
    assert response.finish_reason == "stop"
    assert response.model == "test-model"


def test_tool_calls_with_arguments_streamed_in_pieces_are_assembled_with_valid_json(openai_server):
    call_ids = openai_server.enqueue_tool_calls(
        [
            ("lookup_order", {"order_number": "A-1001"}),
            ("search_help", {"query": "late delivery", "limit": 3}),
        ]
    )
    tokens: list[str] = []

    response = make_model(openai_server).complete(messages=MESSAGES, tools=[LOOKUP_ORDER_TOOL], on_token=tokens.append)

    assert response.finish_reason == "tool_calls"
    assert response.tool_calls == [
        ToolCallRequest(id=call_ids[0], name="lookup_order", arguments=response.tool_calls[0].arguments),
        ToolCallRequest(id=call_ids[1], name="search_help", arguments=response.tool_calls[1].arguments),
    ]
    assert json.loads(response.tool_calls[0].arguments) == {"order_number": "A-1001"}
    assert json.loads(response.tool_calls[1].arguments) == {"query": "late delivery", "limit": 3}
    assert response.text == ""
    assert tokens == []


def test_usage_from_the_final_chunk_is_recorded(openai_server):
    openai_server.enqueue_text("Done.", prompt_tokens=123, completion_tokens=45)

    response = make_model(openai_server).complete(messages=MESSAGES, tools=[])

    assert response.usage == Usage(prompt_tokens=123, completion_tokens=45)
    assert response.usage.total_tokens == 168


@pytest.mark.parametrize("prompt_tokens", [-5, 10**12])
def test_usage_no_step_could_hold_is_estimated_as_unreported(openai_server, prompt_tokens):
    openai_server.enqueue_text("Your order is on its way.", prompt_tokens=prompt_tokens, completion_tokens=7)

    response = make_model(openai_server).complete(messages=MESSAGES, tools=[])

    assert response.usage.estimated is True
    assert 0 < response.usage.prompt_tokens < 10**6 and 0 < response.usage.completion_tokens < 100


def test_the_request_carries_our_messages_tools_and_model_name_and_asks_for_streamed_usage(openai_server):
    openai_server.enqueue_text("Hello there")

    make_model(openai_server, model="gpt-test-mini").complete(messages=MESSAGES, tools=[LOOKUP_ORDER_TOOL])

    assert len(openai_server.requests) == 1
    sent = openai_server.requests[0]
    assert sent["model"] == "gpt-test-mini"
    assert sent["messages"] == MESSAGES
    assert sent["tools"] == [LOOKUP_ORDER_TOOL]
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert openai_server.headers[0]["authorization"] == "Bearer sk-test"


def test_an_empty_tool_list_is_left_out_of_the_request(openai_server):
    openai_server.enqueue_text("Hello there")

    make_model(openai_server).complete(messages=MESSAGES, tools=[])

    assert "tools" not in openai_server.requests[0]


def test_a_rate_limited_request_is_retried_and_then_succeeds(openai_server):
    openai_server.enqueue_error(429, retry_after=0)
    openai_server.enqueue_text("Hello there")

    response = make_model(openai_server, max_retries=2).complete(messages=MESSAGES, tools=[])

    assert response.text == "Hello there"
    assert len(openai_server.requests) == 2
    assert openai_server.requests[0] == openai_server.requests[1]


def test_repeated_server_errors_become_a_retryable_model_error_with_the_status(openai_server):
    for _ in range(3):
        # A tiny Retry-After keeps the SDK's backoff (0.5 s, 1 s, ...) out of the test's time.
        openai_server.enqueue_error(500, message="upstream exploded", retry_after=0.01)

    with pytest.raises(ModelError) as caught:
        make_model(openai_server, max_retries=2).complete(messages=MESSAGES, tools=[])

    assert caught.value.retryable is True
    assert caught.value.status_code == 500
    assert "upstream exploded" in str(caught.value)
    assert len(openai_server.requests) == 3


def test_a_bad_request_is_not_retried_and_is_not_retryable(openai_server):
    openai_server.enqueue_error(400, message="messages[1].content is invalid")
    openai_server.enqueue_text("never served")

    with pytest.raises(ModelError) as caught:
        make_model(openai_server, max_retries=3).complete(messages=MESSAGES, tools=[])

    assert caught.value.retryable is False
    assert caught.value.status_code == 400
    assert "messages[1].content is invalid" in str(caught.value)
    assert len(openai_server.requests) == 1
    assert openai_server.pending == 1


@pytest.mark.parametrize("status", [401, 403, 404, 422])
def test_other_client_errors_are_not_retryable(openai_server, status):
    openai_server.enqueue_error(status)

    with pytest.raises(ModelError) as caught:
        make_model(openai_server, max_retries=3).complete(messages=MESSAGES, tools=[])

    assert (caught.value.retryable, caught.value.status_code) == (False, status)
    assert len(openai_server.requests) == 1


def test_a_connection_dropped_mid_stream_becomes_a_retryable_model_error(openai_server):
    openai_server.enqueue_drop_mid_stream("Your order is on its way and")
    openai_server.enqueue_text("never served")
    tokens: list[str] = []

    with pytest.raises(ModelError) as caught:
        make_model(openai_server, max_retries=3).complete(messages=MESSAGES, tools=[], on_token=tokens.append)

    assert caught.value.retryable is True
    # The customer saw the start of the answer; the adapter does not quietly
    # generate a second one after it. The agent loop decides.
    assert "".join(tokens) == "Your order is on its way and"
    assert len(openai_server.requests) == 1


def test_a_stream_that_ends_without_a_finish_reason_is_a_retryable_model_error(openai_server):
    openai_server.enqueue_truncated_stream("Your refund of")

    with pytest.raises(ModelError) as caught:
        make_model(openai_server).complete(messages=MESSAGES, tools=[])

    assert caught.value.retryable is True
    assert len(openai_server.requests) == 1


def test_a_stream_that_goes_silent_times_out_as_a_retryable_model_error(openai_server):
    openai_server.enqueue_stall_mid_stream("Let me check", seconds=5.0)
    tokens: list[str] = []

    with pytest.raises(ModelError) as caught:
        make_model(openai_server, timeout=0.3, max_retries=0).complete(
            messages=MESSAGES, tools=[], on_token=tokens.append
        )

    assert caught.value.retryable is True
    assert "".join(tokens) == "Let me check"
    # The client gave up on the silence; the server never ended the stream.
    assert openai_server.wait_for_hangups(1, timeout=2.0)


def test_get_model_builds_an_openai_adapter_against_the_configured_base_url(openai_server, settings):
    settings.OPENAI_BASE_URL = openai_server.url
    settings.OPENAI_API_KEY = "sk-from-settings"
    openai_server.enqueue_text("Hello there")

    model = get_model("openai:test-model")
    response = model.complete(messages=MESSAGES, tools=[])

    assert isinstance(model, OpenAIChatModel)
    assert isinstance(model, ChatModel)
    assert model.name == "openai:test-model"
    assert response.text == "Hello there"
    assert openai_server.requests[0]["model"] == "test-model"
    assert openai_server.headers[0]["authorization"] == "Bearer sk-from-settings"


def test_an_endpoint_without_a_key_is_reached_with_a_placeholder_key(openai_server, settings, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    settings.OPENAI_BASE_URL = openai_server.url
    settings.OPENAI_API_KEY = ""
    openai_server.enqueue_text("Hello there")

    response = get_model("openai:local-model").complete(messages=MESSAGES, tools=[])

    assert response.text == "Hello there"
    assert openai_server.headers[0]["authorization"].startswith("Bearer ")
    assert openai_server.headers[0]["authorization"] != "Bearer "


# --- servers written by others (tests/agents/openai_server.py dialects) -------------------------

TWO_CALLS = [("lookup_order", {"order_number": "A-1001"}), ("lookup_order", {"order_number": "B-2002"})]


@pytest.mark.parametrize(
    "dialect",
    [
        "openai", "llama.cpp", "litellm", "ollama", "poolside", "gemini", "azure", "arguments-object", "choices-null",
        "numbered-chunks", "no-choice-index", "content-parts", "whole-json",
    ],
)  # fmt: skip
def test_tool_calls_are_assembled_by_index_whatever_the_server_repeats(dialect):
    server = OpenAIServer(dialect=dialect).start()
    try:
        call_ids = server.enqueue_tool_calls(TWO_CALLS, prompt_tokens=21, completion_tokens=9)

        response = make_model(server).complete(messages=MESSAGES, tools=[LOOKUP_ORDER_TOOL])
    finally:
        server.stop()

    assert [(c.id, c.name) for c in response.tool_calls] == [
        (call_ids[0], "lookup_order"),
        (call_ids[1], "lookup_order"),
    ]
    assert [json.loads(c.arguments) for c in response.tool_calls] == [args for _, args in TWO_CALLS]
    assert response.finish_reason == "tool_calls"


@pytest.mark.parametrize(
    "dialect", ["azure", "choices-null", "numbered-chunks", "no-choice-index", "content-parts", "whole-json"]
)
def test_an_answer_is_read_whole_whatever_its_chunks_say_of_their_one_choice(dialect):
    server = OpenAIServer(dialect=dialect).start()
    try:
        server.enqueue_text("Your order ships tomorrow.")
        tokens: list[str] = []

        response = make_model(server).complete(messages=MESSAGES, tools=[], on_token=tokens.append)
    finally:
        server.stop()

    assert response.text == "Your order ships tomorrow." == "".join(tokens)
    assert response.finish_reason == "stop"


def test_a_server_that_reports_no_usage_gets_an_estimate_marked_as_such():
    server = OpenAIServer(dialect="llama.cpp").start()
    try:
        server.enqueue_text("Your order is on its way and should arrive on Friday.")
        response = make_model(server).complete(messages=MESSAGES, tools=[])
    finally:
        server.stop()

    assert response.usage.estimated is True
    assert response.usage.prompt_tokens > 0 and response.usage.completion_tokens > 0


@pytest.mark.parametrize(
    ("error", "status", "retryable"),
    [
        ({"code": 503, "message": "upstream overloaded"}, 503, True),
        ({"type": "server_error", "message": "The server had an error"}, 500, True),
        ({"code": 403, "message": "flagged by moderation"}, 403, False),
        ({"message": "something odd"}, None, True),
    ],
)
def test_an_error_sent_with_http_200_is_read_as_the_status_it_names(openai_server, error, status, retryable):
    openai_server.enqueue_error_with_200(error)

    with pytest.raises(ModelError) as raised:
        make_model(openai_server, max_retries=0).complete(messages=MESSAGES, tools=[])

    assert raised.value.status_code == status
    assert raised.value.retryable is retryable
    assert error["message"] in str(raised.value)


def test_an_answer_sent_whole_is_read_only_up_to_the_limits_of_an_answer(settings):
    settings.AGENT_MAX_REPLY_CHARS = 100
    settings.AGENT_MAX_TOOL_CALLS_PER_STEP = 1
    settings.AGENT_MAX_TOOL_ARGUMENT_CHARS = 100
    server = OpenAIServer(dialect="whole-json").start()
    try:
        server.enqueue_text("word " * 40_000)  # 200 kB, past 6 x 200 characters + 64 KiB
        with pytest.raises(ModelOutputInvalid, match="sent whole"):
            make_model(server).complete(messages=MESSAGES, tools=[])
    finally:
        server.stop()


@pytest.mark.parametrize("dialect", ["litellm", "whole-json"])
def test_usage_on_the_finishing_chunk_or_a_whole_answer_is_read_and_not_estimated(dialect):
    server = OpenAIServer(dialect=dialect).start()
    try:
        server.enqueue_text("Done.", prompt_tokens=33, completion_tokens=2)
        response = make_model(server).complete(messages=MESSAGES, tools=[])
    finally:
        server.stop()

    assert response.usage == Usage(prompt_tokens=33, completion_tokens=2)
    assert response.text == "Done." and response.finish_reason == "stop"


def test_an_assistant_turn_with_tool_calls_is_sent_with_empty_text_not_null():
    server = OpenAIServer(dialect="llama.cpp").start()
    history = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup_order", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "{}"},
    ]  # fmt: skip
    try:
        server.enqueue_text("Found it.")
        response = make_model(server, max_retries=0).complete(messages=history, tools=[LOOKUP_ORDER_TOOL])
    finally:
        server.stop()

    assert response.text == "Found it."
    assert server.requests[0]["messages"][2]["content"] == ""


def test_an_error_with_a_null_type_is_still_a_model_error_with_its_status():
    server = OpenAIServer(dialect="litellm").start()
    try:
        server.enqueue_error(400, message="litellm.BadRequestError: unknown model")
        with pytest.raises(ModelError) as caught:
            make_model(server).complete(messages=MESSAGES, tools=[])
    finally:
        server.stop()

    assert (caught.value.status_code, caught.value.retryable) == (400, False)
    assert "unknown model" in str(caught.value)


def test_retry_after_from_the_server_reaches_the_loop(openai_server):
    for _ in range(2):
        openai_server.enqueue_error(429, message="slow down", retry_after=7)

    with pytest.raises(ModelError) as caught:
        make_model(openai_server, max_retries=1).complete(messages=MESSAGES, tools=[])

    assert caught.value.retryable is True and caught.value.retry_after == 7.0


def test_the_loop_waits_at_least_what_the_server_asked_with_jitter_otherwise():
    from agents.runner import retry_delay

    assert retry_delay(1, retry_after=7.0) >= 7.0
    delays = {retry_delay(3) for _ in range(20)}
    assert all(4.0 <= d <= 8.0 for d in delays) and len(delays) > 1


# --- errors sent inside a stream that began with HTTP 200 -------------------------------------


@pytest.mark.parametrize(
    ("error", "status"),
    [
        ({"code": 502, "message": "The model is down or sent an invalid response"}, 502),  # OpenRouter
        ({"code": 429, "message": "Rate limit exceeded upstream"}, 429),
        ({"code": "503", "message": "No provider available"}, 503),
        ({"code": "server_error", "message": "Provider returned error"}, 500),
        ({"message": "The server had an error while processing your request.", "type": "server_error",
          "param": None, "code": None}, 500),  # OpenAI's own
    ],
)  # fmt: skip
def test_an_outage_reported_inside_a_stream_is_an_outage_of_the_model(openai_server, error, status):
    from agents.outage import is_outage

    openai_server.enqueue_error_mid_stream("Let me", error)

    with pytest.raises(ModelError) as caught:
        make_model(openai_server).complete(messages=MESSAGES, tools=[])

    assert caught.value.status_code == status
    assert caught.value.retryable is True
    assert is_outage(caught.value), "an overloaded or down upstream counted as a failure of the ticket"
    assert len(openai_server.requests) == 1


@pytest.mark.parametrize(
    "error",
    [
        {"code": 403, "message": "Your input was flagged by moderation"},  # OpenRouter
        {"message": "invalid request", "type": "invalid_request", "code": 400},  # Perplexity, as its first event
    ],
)
def test_a_refusal_reported_inside_a_stream_is_not_tried_again_as_if_transient(openai_server, error):
    from agents.outage import is_outage

    openai_server.enqueue_error_mid_stream("", error)

    with pytest.raises(ModelError) as caught:
        make_model(openai_server).complete(messages=MESSAGES, tools=[])

    assert caught.value.status_code == error["code"]
    assert caught.value.retryable is False and not is_outage(caught.value)
