"""Each app declares the timeline event kinds it appends (tickets.timeline); tickets knows none of
the others' kinds in advance, and a kind is declared by one app only."""

from __future__ import annotations

import pytest

from tickets import timeline


def test_each_app_declares_its_own_kinds_and_how_customers_see_them():
    by_app = {k.name: k.app for k in timeline.kinds()}
    assert by_app["message"] == "tickets" and by_app["status_changed"] == "tickets"
    assert by_app["tool_call_started"] == "agents" and by_app["refund_succeeded"] == "agents"
    assert by_app["approval_requested"] == "approvals" and by_app["approval_decided"] == "approvals"
    assert timeline.kind("tool_call_finished").present is None  # staff only
    assert timeline.kind("agent_run_started").present is not None


def test_a_kind_cannot_be_declared_by_a_second_app():
    with pytest.raises(ValueError, match="already declared by agents"):
        timeline.register("tool_call_started", app="approvals", description="again")
