"""Agent profiles: a run keeps the profile version it started with (prompt, model, tools, approval
policy) to its end, across an approval wait, a new active version and a worker restart; new runs
take the active version; staff move a paused run explicitly, on the timeline."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.conversation import request_of
from agents.models import AgentProfile, AgentRun, ApprovalPolicy, CallStatus, ModelStep, RunStatus, ToolCall
from agents.profiles import active_profile, profile_new_version, run_move_to_active
from agents.runner import advance
from agents.tools import tool_specs
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.test_refunds import ScriptedRefund
from tests.approvals.conftest import make_staff
from tests.approvals.test_approvals import provider_refunds, refund_ticket
from tests.approvals.test_with_workers import decide_over_http
from tests.conftest import make_customer, make_order
from tests.workers import wait_until
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

NEW_PROMPT = "You are the support agent, profile version 2. Answer in one sentence."


def system_prompt_of(run: AgentRun) -> str:
    step = ModelStep.objects.filter(run=run).order_by("-index").first()
    return request_of(step)[0]["content"]


@pytest.mark.workers
def test_a_paused_run_keeps_its_version_through_a_new_version_and_a_restart(sandbox, cluster):  # noqa: ANN001
    approver = make_staff("profile-approver", can_decide=True)
    worker = cluster.worker()
    paused, order = refund_ticket(sandbox, flagged=True, number="V-1001")
    wait_until(lambda: ApprovalRequest.objects.filter(ticket=paused).exists(), timeout=60, what="the pause",
               cluster=cluster)  # fmt: skip
    run = AgentRun.objects.get(ticket=paused)
    assert run.status == RunStatus.WAITING_APPROVAL and run.profile.version == 1

    v2 = profile_new_version(changes={"system_prompt": NEW_PROMPT}, user=approver, note="shorter answers")
    assert v2.version == 2 and v2.is_active
    worker.stop()  # a deploy: the worker goes away and comes back
    cluster.worker()

    # A new ticket starts with the active version.
    customer = make_customer()
    make_order(customer, number="V-2001")
    fresh, _ = ticket_services.ticket_open(customer=customer, subject="Where", body="Where is my order V-2001?")
    wait_until(lambda: Message.objects.filter(ticket=fresh, author_kind=AuthorKind.AGENT).exists(), timeout=60,
               what="the new ticket's answer", cluster=cluster)  # fmt: skip
    fresh_run = AgentRun.objects.get(ticket=fresh)
    assert fresh_run.profile.version == 2 and system_prompt_of(fresh_run).startswith(NEW_PROMPT)

    # The paused run resumes on its own version after the decision.
    decide_over_http(approver, ApprovalRequest.objects.get(ticket=paused), "approve")
    wait_until(lambda: AgentRun.objects.get(pk=run.pk).status == RunStatus.COMPLETED, timeout=60,
               what="the paused run to finish", cluster=cluster)  # fmt: skip
    run.refresh_from_db()
    assert run.profile.version == 1 and NEW_PROMPT not in system_prompt_of(run)
    assert len(provider_refunds(sandbox, order)) == 1
    assert not paused.events.filter(kind="agent_profile_changed").exists()


def test_staff_move_a_paused_run_to_the_active_version_on_the_timeline(sandbox):  # noqa: ANN001
    staff = make_staff("profile-mover", can_decide=True)
    paused, _ = refund_ticket(sandbox, flagged=True, number="V-3001")
    advance(paused.pk)
    run = AgentRun.objects.get(ticket=paused)
    assert run.status == RunStatus.WAITING_APPROVAL and run.profile.version == 1
    profile_new_version(changes={"system_prompt": NEW_PROMPT}, user=staff)

    assert run_move_to_active(run=run, user=staff)
    assert not run_move_to_active(run=run, user=staff)  # on it already: nothing more

    run.refresh_from_db()
    assert run.profile.version == 2
    event = paused.events.get(kind="agent_profile_changed")
    assert event.payload == {"run_id": run.pk, "from_version": 1, "to_version": 2}
    assert event.actor_user == staff


def test_a_paused_refund_moved_to_a_version_without_refunds_is_not_paid_when_approved(sandbox):  # noqa: ANN001
    """The tools a call may use are those of the run's version when it runs, not when it was asked:
    staff who move a waiting run to a version that turned refunds off get no refund by approving."""
    staff = make_staff("profile-mover-2", can_decide=True)
    paused, order = refund_ticket(sandbox, flagged=True, number="V-3003")
    advance(paused.pk)
    run = AgentRun.objects.get(ticket=paused)
    tools = [t for t in active_profile().tools if t["name"] != "issue_refund"]
    profile_new_version(changes={"tools": tools}, user=staff)
    assert run_move_to_active(run=run, user=staff)

    approval = ApprovalRequest.objects.get(ticket=paused)
    approval_services.approval_decide(approval_id=approval.pk, user=staff, approve=True)
    advance(paused.pk)

    assert provider_refunds(sandbox, order) == []
    call = ToolCall.objects.get(run=run, name="issue_refund")
    assert call.status == CallStatus.FAILED
    assert "the tool issue_refund is not enabled for this agent (profile version 2)" in call.error


def test_the_move_is_an_admin_action_and_a_finished_run_is_left_alone(sandbox, admin_client):  # noqa: ANN001
    paused, _ = refund_ticket(sandbox, flagged=True, number="V-3002")
    advance(paused.pk)
    customer = make_customer()
    done, _ = ticket_services.ticket_open(customer=customer, subject="Hi", body="Hello")
    advance(done.pk)
    profile_new_version(changes={"system_prompt": NEW_PROMPT}, user=None)
    runs = AgentRun.objects.filter(ticket__in=[paused, done])

    response = admin_client.post(
        "/admin/agents/agentrun/",
        {"action": "move_runs_to_active", "_selected_action": [str(r.pk) for r in runs]},
        follow=True,
    )
    assert response.status_code == 200
    assert "Moved 1 run(s) to version 2; 1 left as they were" in response.content.decode()
    assert AgentRun.objects.get(ticket=paused).profile.version == 2
    assert AgentRun.objects.get(ticket=done).profile.version == 1


def test_the_first_version_comes_from_the_settings(settings):  # noqa: ANN001
    settings.AGENT_SYSTEM_PROMPT = "Seeded prompt."
    settings.AGENT_MODEL = "offline"
    ApprovalPolicy.objects.update_or_create(pk=1, defaults={"refund_threshold_cents": 12345})
    profile = active_profile()
    assert (profile.version, profile.is_active, profile.system_prompt, profile.model) == (
        1,
        True,
        "Seeded prompt.",
        "offline",
    )
    assert profile.approval_policy["refund_threshold_cents"] == 12345
    assert {t["name"] for t in profile.tools} >= {"lookup_order", "issue_refund"}
    settings.AGENT_SYSTEM_PROMPT = "Changed later."
    assert active_profile().system_prompt == "Seeded prompt."  # only the first version is seeded


def test_saving_a_version_in_the_admin_makes_the_next_one_and_shows_the_diff(admin_client):  # noqa: ANN001
    v1 = active_profile()
    page = admin_client.get(f"/admin/agents/agentprofile/{v1.pk}/change/")
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in ["model", "model_parameters", "tools", "approval_policy"]}
    data.update(system_prompt="Be brief.", note="brevity", make_active="on")
    response = admin_client.post(f"/admin/agents/agentprofile/{v1.pk}/change/", data, follow=True)
    assert response.status_code == 200, response.content.decode()[:3000]

    v1.refresh_from_db()
    assert v1.system_prompt == "" and not v1.is_active  # the version opened is never changed
    v2 = AgentProfile.objects.get(version=2)
    assert v2.is_active and v2.system_prompt == "Be brief." and v2.note == "brevity"
    page = admin_client.get(f"/admin/agents/agentprofile/{v2.pk}/change/").content.decode()
    assert "+  &quot;system_prompt&quot;: &quot;Be brief.&quot;" in page or '+  "system_prompt": "Be brief."' in page
    assert admin_client.post(f"/admin/agents/agentprofile/{v1.pk}/delete/").status_code == 403

    refused = admin_client.post(
        f"/admin/agents/agentprofile/{v2.pk}/change/", {**data, "tools": '[{"name": "drop_tables"}]'}
    )
    assert "No such tool: drop_tables" in refused.content.decode()
    assert AgentProfile.objects.count() == 2


def test_editing_the_approval_policy_in_the_admin_makes_a_version(admin_client):  # noqa: ANN001
    active_profile()
    policy = ApprovalPolicy.current()
    page = admin_client.get(f"/admin/agents/approvalpolicy/{policy.pk}/change/")
    form = page.context["adminform"].form
    data = {name: form[name].value() if form[name].value() is not None else "" for name in form.fields}
    data["refund_threshold_cents"] = 5000
    data["customer_confirms_refunds"] = "on" if data.get("customer_confirms_refunds") else ""
    assert admin_client.post(f"/admin/agents/approvalpolicy/{policy.pk}/change/", data).status_code == 302
    assert active_profile().version == 2
    assert active_profile().approval_policy["refund_threshold_cents"] == 5000


def test_a_run_decides_with_its_versions_policy_not_the_table(sandbox):  # noqa: ANN001
    active_profile()
    lower = {**active_profile().approval_policy, "refund_threshold_cents": 1000}
    profile_new_version(changes={"approval_policy": lower}, user=None)
    assert ApprovalPolicy.current().refund_threshold_cents == 1000  # the admin's table shows the active rules
    ApprovalPolicy.objects.update(refund_threshold_cents=20000)  # the table written behind the admin's back
    ticket, _ = refund_ticket(sandbox, total_cents=4999, number="V-4001")
    advance(ticket.pk)
    assert ApprovalPolicy.current().refund_threshold_cents == 20000  # the table says $200...
    approval = ApprovalRequest.objects.get(ticket=ticket)  # ...the version says $10: it waits
    assert "$10.00" in approval.reason


def test_a_tool_the_version_does_not_enable_is_neither_offered_nor_run(sandbox):  # noqa: ANN001
    tools = [t for t in active_profile().tools if t["name"] != "issue_refund"]
    profile = profile_new_version(changes={"tools": tools}, user=None)
    offered = {s["function"]["name"] for s in tool_specs(enabled=frozenset(t["name"] for t in tools))}
    assert "issue_refund" not in offered and "lookup_order" in offered
    ticket, order = refund_ticket(sandbox, total_cents=4999, number="V-5001")
    # A model that asks for it anyway: the call is recorded as refused, and nothing is paid.
    advance(ticket.pk, model=ScriptedRefund('{"order_number": "V-5001", "amount_cents": 4999}'))
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.FAILED and "not enabled" in call.error
    assert provider_refunds(sandbox, order) == []
    assert AgentRun.objects.get(ticket=ticket).profile == profile


def test_the_admin_shows_which_version_each_run_used(admin_client):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Hi", body="Hello")
    advance(ticket.pk)
    page = admin_client.get("/admin/agents/agentrun/").content.decode()
    assert ">v1<" in page
    assert Client().get("/admin/agents/agentprofile/").status_code == 302


def test_the_versions_list_counts_each_versions_runs_in_its_own_query_not_one_per_row(admin_client):  # noqa: ANN001
    import re

    from django.contrib.auth.models import User
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def the_list() -> tuple[int, str]:
        with CaptureQueriesContext(connection) as queries:
            page = admin_client.get("/admin/agents/agentprofile/")
        assert page.status_code == 200
        return len(queries.captured_queries), page.content.decode()

    author = User.objects.create_user("prompt-writer", email="writer@example.com")
    for _ in range(3):  # three runs on the first version
        ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Hi", body="Hello")
        AgentRun.objects.create(ticket=ticket, profile=active_profile(), status=RunStatus.COMPLETED)
    profile_new_version(changes={"system_prompt": "v2"}, user=author, note="second")
    few, _ = the_list()
    for n in range(3, 8):
        profile_new_version(changes={"system_prompt": f"v{n}"}, user=author, note=f"version {n}")
    many, page = the_list()

    assert many == few
    rows = re.findall(r"<tr>.*?</tr>", page, re.S)
    counts = {
        int(v): int(c)
        for v, c in (
            re.search(r'field-version.*?>(\d+)<.*field-runs_count">(\d+)<', row, re.S).groups()
            for row in rows
            if "field-version" in row
        )
    }
    assert counts == {1: 3, **{n: 0 for n in range(2, 8)}}
    assert page.count("prompt-writer") == 6
