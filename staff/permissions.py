"""The "Support staff" group: what a member of the support team needs (created by migration 0001,
kept by ``staff.apps`` after a flush)."""

GROUP = "Support staff"
PERMISSIONS = [
    ("tickets", "handle_ticket"),
    ("approvals", "decide_approval"),
    *[("tickets", f"view_{m}") for m in ("ticket", "message", "ticketevent", "customer", "order", "orderline")],
    ("tickets", "view_helparticle"),
    *[("agents", f"view_{m}") for m in ("agentrun", "modelstep", "toolcall", "refund")],
    ("approvals", "view_approvalrequest"),
]
