"""The admin's agent profile form checks the approval policy's values, not only its keys.

A plausible wrong value must be a form error naming the field, never a crash in a worker or a 500:
``"refund_threshold_cents": "30000"`` (a quoted number) is read as the number, ``-100`` is refused,
a zero confirmation window (or approval expiry) is refused on the profile and on the Approval policy
page, and a model class path that cannot be built is said on the field.
"""

from __future__ import annotations

import json

import pytest

from agents.models import AgentRun
from agents.profiles import active_profile
from agents.runner import advance
from tests.agents.conftest import retry_time_comes
from tests.approvals.test_approvals import provider_refunds, refund_ticket
from tickets.models import Ticket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def _save_policy_in_the_admin(admin_client, **values):  # noqa: ANN001, ANN003, ANN202
    """Open the active version in the admin, change approval policy values, save it (make active)."""
    opened = active_profile()
    page = admin_client.get(f"/admin/agents/agentprofile/{opened.pk}/change/")
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in ["system_prompt", "model", "model_parameters", "tools"]}
    policy = {**json.loads(form["approval_policy"].value()), **values}
    data.update(approval_policy=json.dumps(policy), note="policy edited", make_active="on")
    return admin_client.post(f"/admin/agents/agentprofile/{opened.pk}/change/", data)


def test_a_quoted_threshold_is_read_as_the_number_not_left_to_crash_every_refund_in_the_worker(admin_client, sandbox):  # noqa: ANN001, E501
    _save_policy_in_the_admin(admin_client, refund_threshold_cents="30000")
    assert active_profile().approval_policy["refund_threshold_cents"] == 30000  # stored as the number

    # What the agent then does with an ordinary $15 refund (no approval needed under any threshold).
    ticket, order = refund_ticket(sandbox, total_cents=1500, number="R-2901")
    for _ in range(5):
        advance(ticket.pk)
        retry_time_comes(ticket.pk)
    ticket = Ticket.objects.get(pk=ticket.pk)
    errors = list(AgentRun.objects.filter(ticket=ticket).values_list("status", "failures", "last_error"))

    assert [r["amount"] for r in provider_refunds(sandbox, order)] == [1500], (
        "after the admin saved refund_threshold_cents as the string '30000', a $15 refund was never paid: "
        f"ticket {ticket.status}, runs {errors}"
    )


def test_a_negative_threshold_is_a_form_error_not_a_server_error(admin_client, db):  # noqa: ANN001
    admin_client.raise_request_exception = False
    response = _save_policy_in_the_admin(admin_client, refund_threshold_cents=-100)

    assert response.status_code != 500, (
        "saving an agent profile with refund_threshold_cents = -100 in the admin crashed with a 500 "
        "(IntegrityError from the approval policy table) instead of a form error naming the value"
    )
    assert response.status_code == 200 and "refund_threshold_cents" in response.content.decode()


@pytest.mark.customer_confirms
def test_a_zero_confirmation_window_is_refused_not_left_to_refuse_every_confirm(admin_client, sandbox):  # noqa: ANN001
    """The Approval policy page (and the profile form) take confirmation_minutes = 0: every refund's
    question is then expired when it is asked, and the customer's Confirm, pressed at once, is refused."""
    from agents.models import ApprovalPolicy
    from tests.agents.test_confirmation import answer, ask_for_refund, question, signed_in

    active_profile()
    policy = ApprovalPolicy.current()
    page = admin_client.get(f"/admin/agents/approvalpolicy/{policy.pk}/change/")
    form = page.context["adminform"].form
    data = {name: form[name].value() if form[name].value() is not None else "" for name in form.fields}
    data["confirmation_minutes"] = 0
    data["customer_confirms_refunds"] = "on"
    admin_client.post(f"/admin/agents/approvalpolicy/{policy.pk}/change/", data)
    accepted = active_profile().approval_policy.get("confirmation_minutes") == 0

    alice, order, ticket = ask_for_refund(sandbox, number="R-2903", total=1500)
    response = answer(signed_in(alice), ticket, question(ticket), "confirm")

    assert not accepted, (
        "the admin accepted confirmation_minutes = 0 for the active profile: the customer's Confirm, "
        f"pressed right after the question was asked, got {response.status_code} {response.content.decode()[:200]!r}"
    )


def test_a_model_class_path_that_cannot_be_built_is_a_form_error_not_a_server_error(admin_client, db):  # noqa: ANN001
    """The form's clean_model catches ImproperlyConfigured only: the built-in adapter's own class path
    (a plausible reading of "the dotted path of a class implementing agents.llm.ChatModel") raises a
    TypeError while being built, and the save is a 500."""
    admin_client.raise_request_exception = False
    opened = active_profile()
    page = admin_client.get(f"/admin/agents/agentprofile/{opened.pk}/change/")
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in ["system_prompt", "model_parameters", "tools", "approval_policy"]}
    data.update(model="agents.llm_openai.OpenAIChatModel", note="model", make_active="on")

    response = admin_client.post(f"/admin/agents/agentprofile/{opened.pk}/change/", data)

    assert response.status_code != 500, (
        "saving an agent profile whose model is 'agents.llm_openai.OpenAIChatModel' crashed with a 500 "
        "instead of a form error naming the model"
    )


def _save_tools_in_the_admin(admin_client, tools):  # noqa: ANN001, ANN202
    opened = active_profile()
    page = admin_client.get(f"/admin/agents/agentprofile/{opened.pk}/change/")
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in ["system_prompt", "model", "model_parameters", "approval_policy"]}
    data.update(tools=json.dumps(tools), note="tools edited", make_active="on")
    return admin_client.post(f"/admin/agents/agentprofile/{opened.pk}/change/", data)


@pytest.mark.parametrize(
    "tool",
    [{"name": 5}, {"name": True}, {"name": ["issue_refund"]}, {"name": {"a": 1}},
     {"name": "issue_refund", "requires_approval": "false"}, {"name": "issue_refund", "requires_approval": 0}],
    ids=["number", "boolean", "list", "object", "quoted-false", "zero"],
)  # fmt: skip
def test_a_tool_entry_of_the_wrong_type_is_a_form_error_and_changes_nothing(admin_client, tool):  # noqa: ANN001
    """Well-formed JSON of the wrong shape: said on the form, no new version. ("false" in quotes was
    read as true: every tool then waited for a staff approval.)"""
    admin_client.raise_request_exception = False
    before = active_profile()

    response = _save_tools_in_the_admin(admin_client, [tool])

    assert response.status_code == 200, response.status_code  # the form again, with the reason
    assert "tools" in response.content.decode()
    assert active_profile().pk == before.pk


def test_requires_approval_left_out_is_false(admin_client, db):  # noqa: ANN001
    tools = [{"name": t["name"]} for t in active_profile().tools]
    _save_tools_in_the_admin(admin_client, tools)
    assert not any(t["requires_approval"] for t in active_profile().tools)
