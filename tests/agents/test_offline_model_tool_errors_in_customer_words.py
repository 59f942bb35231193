"""The offline model says a tool's error to the customer in words for customers.

A tool's error is written for the model: one that tells it what to do ("Tell the customer ...,
do not ask for the refund again"), or speaks of the machinery (profiles, arguments, approvals of
exact arguments), is not what a customer should read. A plain sentence about their order is.
"""

from __future__ import annotations

import json

import pytest

from agents.offline_model import OfflineDeterministicModel
from agents.profiles import not_enabled
from agents.refunds import GIVEN_UP
from agents.tools import REGISTRY

REQUEST = "Please refund $20 of order A-1001"
ORDER = {"order_number": "A-1001", "status": "delivered", "total_cents": 5000, "currency": "usd"}


def _answer(tool: str, error: str) -> str:
    refund_args = {"order_number": "A-1001", "amount_cents": 2000}
    messages = [
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": REQUEST},
        {"role": "assistant", "content": "", "tool_calls": [_call("c1", "lookup_order", {"order_number": "A-1001"})]},
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps(ORDER)},
    ]
    if tool == "issue_refund":
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [_call("c2", "issue_refund", refund_args)]},
            {"role": "tool", "tool_call_id": "c2", "content": json.dumps({"error": error})},
        ]
    else:
        messages[3] = {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"error": error})}
        messages[1] = {"role": "user", "content": "Where is my order A-1001?"}
    tools = [REGISTRY[name].spec() for name in ("lookup_order", "issue_refund")]
    response = OfflineDeterministicModel().complete(messages=messages, tools=tools)
    assert not response.tool_calls, response.tool_calls
    return response.text


def _call(call_id: str, name: str, args: dict) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


@pytest.mark.parametrize(
    ("tool", "error"),
    [
        ("issue_refund", GIVEN_UP),
        ("issue_refund", "This refund needs a staff approval for these exact arguments before it can run."),
        ("issue_refund", not_enabled("issue_refund", 3)),
        ("issue_refund", "Invalid arguments for issue_refund: 'amount_cents' is a required property."),
        ("lookup_order", "Arguments for lookup_order are not valid JSON: Expecting value."),
    ],
    ids=["given-up", "approval-of-exact-arguments", "not-enabled", "invalid-arguments", "bad-json"],
)
def test_an_error_written_for_the_model_is_not_what_the_customer_reads(tool, error):
    text = _answer(tool, error)
    assert text.strip()
    for words in ("Tell the customer", "do not ask", "profile version", "arguments", "not enabled", "Not sent again"):
        assert words.lower() not in text.lower(), f"the customer reads {text!r}"


def test_a_plain_sentence_about_the_order_is_said_as_it_is():
    text = _answer("issue_refund", "Order A-1001 has no payment to refund.")
    assert "Order A-1001 has no payment to refund." in text
