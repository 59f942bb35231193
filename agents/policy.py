"""Which agent calls need a staff approval: decided in code, once, with the call's intent.

The caller records the answer on the call in the same transaction as its intent
(DESIGN.md, invariant 11), so no crash, retry or failed pause can skip it: a call
that needs an approval is created paused, and executes only with an approved
request bound to its exact arguments (``agents.approval.may_execute``).

Two sources, both declared in code, neither patched in at app start:

- the per-tool rules of the run's agent profile version (``agents.profiles``; an operator sets
  them in the admin, on the profile or through ``ToolApprovalRule``);
- the tool's own ``needs_approval`` hook, declared where the tool is registered
  (the refund rules live with ``issue_refund`` in ``agents.refunds``).
"""

from __future__ import annotations

from typing import Any

from agents.tools import Tool, ToolContext


def approval_reason(*, tool: Tool, ctx: ToolContext, args: dict[str, Any], always: frozenset[str]) -> str:
    """Why this call needs a staff approval, or "" when it needs none. Caller: inside the intent
    transaction; ``always`` is ``agents.profiles.tools_always_approved`` of the run's version."""
    if tool.name in always:
        return f"every {tool.name} call needs a staff approval"
    if tool.needs_approval is not None:
        return tool.needs_approval(ctx, args) or ""
    return ""
