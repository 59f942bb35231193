"""Agent profiles: versions of what the agent is, and the one a run is pinned to.

A profile version (``AgentProfile``) holds the system prompt, the model and its parameters,
the tools enabled (with their replay policies and approval rules) and the approval policy's
values. Versions are immutable: a change makes the next version (``profile_new_version``),
which becomes active when asked. A run pins the active version when it starts
(``agents.services.run_start``) and reads everything from it to its end, so a run paused on
an approval for days finishes as it began, whatever was deployed meanwhile. Operators move
paused runs to the active version explicitly (``run_move_to_active``), on the timeline.

When no version exists yet, the first is made from the settings and tables that held these
values before profiles: ``AGENT_SYSTEM_PROMPT``, ``AGENT_MODEL``, the tool registry with
``ToolApprovalRule``, and ``ApprovalPolicy``.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, models, transaction

from agents.llm import OWN_REQUEST_KEYS
from agents.llm_openai import parameters_problems as openai_parameters_problems
from agents.models import (
    FINAL_CALL_STATUSES,
    PAUSED_RUN_STATUSES,
    AgentProfile,
    AgentRun,
    ApprovalDecision,
    ApprovalPolicy,
    ReplayPolicy,
    ToolApprovalRule,
    ToolCall,
)
from agents.tools import REGISTRY
from support import reads
from tickets import services as ticket_services
from tickets.models import ActorKind

POLICY_FIELDS = (
    "refund_threshold_cents",
    "customer_limit_cents",
    "customer_window_days",
    "ttl_hours",
    "reminder_before_hours",
    "customer_confirms_refunds",
    "confirmation_minutes",
)
# The currency the policy's amounts are in (its threshold and customer limit, in that currency's minor
# unit): a value of the version, as they are, so that a run decides with the currency its version was made
# with, whatever APPROVAL_POLICY_CURRENCY says by then (that setting is the default of a version naming none).
POLICY_CURRENCY = "currency"
# What a version is made of (compared by the diff, copied into the next version).
CONTENT_FIELDS = ("system_prompt", "model", "model_parameters", "tools", "approval_policy")


# What a version may hold, checked wherever one is made: the admin's page, and a state bundle's restore
# (a version restored is one its runs resume on). Each returns what is wrong, in words for an operator.


def tools_problems(tools: Any) -> list[str]:
    """Why ``tools`` is not a version's list of enabled tools ([] when it is)."""
    shape = 'A list of tools: [{"name": "...", "requires_approval": true or false}, ...].'
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and isinstance(t.get("name"), str) and t["name"] for t in tools
    ):
        return [shape]
    names = [t["name"] for t in tools]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        # One entry per tool: two rules for one tool were read one way by the agent (any entry
        # needing approval) and the other by the tool rule page (the last entry).
        return [f"Each tool once; listed more than once: {', '.join(twice)}."]
    unknown = sorted({t["name"] for t in tools} - set(REGISTRY))
    if unknown:
        return [f"No such tool: {', '.join(unknown)}. Known: {', '.join(sorted(REGISTRY))}."]
    # true or false as JSON writes them, or left out (false): "false" in quotes is not read as true.
    odd = [t["name"] for t in tools if not isinstance(t.get("requires_approval", False), bool)]
    if odd:
        return [f"requires_approval must be true or false (no quotes): {', '.join(odd)}."]
    return []


# The longest each length of time may be: an approval's expiry is counted from now, and the customer's
# window back from now, as dates. Ten years is past any wait a ticket has; PostgreSQL's integer limit (the
# field's own) is past the year 9999, which no date holds: every refund failed where it was counted.
TEN_YEARS = {
    "ttl_hours": 10 * 365 * 24,
    "reminder_before_hours": 10 * 365 * 24,
    "customer_window_days": 10 * 365,
    "confirmation_minutes": 10 * 365 * 24 * 60,
}


def policy_time_problems(values: dict[str, Any]) -> dict[str, str]:
    """The lengths of time among ``values`` (the approval policy's, as cleaned) longer than ten years,
    each with words for an operator."""
    return {
        name: f"{value} is longer than ten years (at most {TEN_YEARS[name]})"
        for name, value in values.items()
        if name in TEN_YEARS and isinstance(value, int) and value > TEN_YEARS[name]
    }


def approval_policy_cleaned(policy: Any) -> tuple[dict[str, Any], list[str]]:
    """A version's approval policy values as the approval policy's own fields take them (their type, their
    bounds: "30000" is read as 30000, -100 or a zero window is refused), and what is wrong with them."""
    if not isinstance(policy, dict):
        return {}, ["An object of the approval policy's values."]
    known = (*POLICY_FIELDS, POLICY_CURRENCY)
    unknown = sorted(set(policy) - set(known))
    if unknown:
        return {}, [f"Not a policy value: {', '.join(unknown)}. Known: {', '.join(known)}."]
    cleaned, problems = {}, []
    for name, value in policy.items():
        if name == POLICY_CURRENCY:
            if isinstance(value, str) and re.fullmatch(r"[A-Za-z]{3}", value.strip()):
                cleaned[name] = value.strip().lower()
            else:
                problems.append(f"{name}: {value!r} is not a three-letter ISO currency code such as usd or eur")
            continue
        field = ApprovalPolicy._meta.get_field(name)
        if isinstance(value, bool) and not isinstance(field, models.BooleanField):
            problems.append(f"{name}: {value!r} is not a number")
            continue
        try:
            cleaned[name] = field.clean(value, None)
        except ValidationError as exc:
            problems.append(f"{name}: {' '.join(exc.messages)}")
    problems += [f"{name}: {words}" for name, words in policy_time_problems(cleaned).items()]
    return cleaned, problems


def model_parameters_problems(parameters: Any) -> list[str]:
    """Why ``parameters`` are not a version's model parameters ([] when they are)."""
    if not isinstance(parameters, dict):
        return ['The model parameters are a JSON object, such as {"temperature": 0.2}.']
    own = sorted(set(parameters) & OWN_REQUEST_KEYS)
    if own:
        return [f"Set by the agent itself, not a model parameter: {', '.join(own)}."]
    return []


def content_problems(content: dict[str, Any]) -> list[str]:
    """What is wrong with a version's content (``CONTENT_FIELDS``) that no version made here may hold, each
    named by its field. The model is not built: a class of another deployment's may not be installed yet."""
    problems = [] if isinstance(content.get("model"), str) and content["model"].strip() else ["model: no model named"]
    problems += [f"tools: {p}" for p in tools_problems(content.get("tools"))]
    policy = content.get("approval_policy")
    cleaned, policy_problems = approval_policy_cleaned(policy)
    # Stored as the fields take them ("30000" is stored 30000): a value in another form is read as it is.
    policy_problems += [
        f"{name}: {policy[name]!r} is not stored as the policy's value ({value!r})"
        for name, value in cleaned.items()
        if type(value) is not type(policy[name]) or value != policy[name]
    ]
    problems += [f"approval_policy: {p}" for p in policy_problems]
    parameters = content.get("model_parameters")
    problems += [f"model_parameters: {p}" for p in model_parameters_problems(parameters)]
    if isinstance(content.get("model"), str) and content["model"].strip().startswith("openai:"):
        if isinstance(parameters, dict):  # sent with every request of the version's runs: each one it can carry
            problems += [f"model_parameters: {p}" for p in openai_parameters_problems(parameters)]
    return problems


@dataclass(frozen=True)
class PolicyValues:
    """The approval policy a run decides with: the values of its profile version."""

    refund_threshold_cents: int
    customer_limit_cents: int | None
    customer_window_days: int
    ttl_hours: int
    reminder_before_hours: int
    customer_confirms_refunds: bool
    confirmation_minutes: int
    # The currency of the amounts above (lower case): a refund in any other is reviewed, never compared.
    currency: str

    @property
    def customer_limit(self) -> int:
        return self.refund_threshold_cents if self.customer_limit_cents is None else self.customer_limit_cents


def _policy_snapshot(policy: ApprovalPolicy) -> dict[str, Any]:
    return policy_with_currency({name: getattr(policy, name) for name in POLICY_FIELDS})


def policy_with_currency(policy: Any) -> Any:
    """A version's approval policy naming its currency: the one it names, else APPROVAL_POLICY_CURRENCY's
    now, as the version is made (and never again read from the setting). A version naming none (from a
    state bundle written before versions named it) is the same version as one naming this one: it is read
    in it (``policy_values``)."""
    if not isinstance(policy, dict) or policy.get(POLICY_CURRENCY):
        return policy
    return {**policy, POLICY_CURRENCY: settings.APPROVAL_POLICY_CURRENCY}


def _tools_snapshot() -> list[dict[str, Any]]:
    always = set(ToolApprovalRule.objects.filter(requires_approval=True).values_list("tool_name", flat=True))
    return [
        {"name": tool.name, "replay_policy": tool.replay_policy, "requires_approval": tool.name in always}
        for tool in REGISTRY.values()
    ]


def active_profile() -> AgentProfile:
    """The active version; the first one, made from the settings, when there is none."""
    found = reads.select(AgentProfile, "is_active", [])
    if found:
        return found[0]
    try:
        with transaction.atomic():
            if not AgentProfile.objects.exists():
                return AgentProfile.objects.create(
                    version=1,
                    is_active=True,
                    system_prompt=settings.AGENT_SYSTEM_PROMPT,
                    model=settings.AGENT_MODEL or "offline",
                    tools=_tools_snapshot(),
                    approval_policy=_policy_snapshot(ApprovalPolicy.current()),
                    note="The first version, from AGENT_SYSTEM_PROMPT, AGENT_MODEL and the approval policy.",
                )
    except IntegrityError:
        pass  # another process made it first
    profile = AgentProfile.objects.filter(is_active=True).first()
    if profile is None:  # versions exist but none is active: the newest one is
        profile = profile_activate(version=AgentProfile.objects.order_by("-version").first().version, user=None)
    return profile


# The approval policy tables as they are now, in one statement: the policy row and each tool's rule.
_TABLES_SQL = (
    "SELECT (SELECT row_to_json(p) FROM approvals_approvalpolicy p ORDER BY p.id LIMIT 1), "
    "(SELECT json_object_agg(r.tool_name, r.requires_approval) FROM approvals_toolapprovalrule r)"
)


Tables = tuple[dict[str, Any] | None, dict[str, bool] | None]


def policy_tables_sql() -> tuple[str, list[Any]]:
    """The query of ``_tables_now``, to send along with others (its rows: ``policy_tables_from``)."""
    return _TABLES_SQL, []


def policy_tables_from(found: list[tuple[Any, ...]]) -> Tables:
    policy, rules = found[0]
    return policy, rules


def _tables_now() -> Tables:
    """The approval policy row and each tool's rule, as they are now (``_TABLES_SQL``)."""
    return policy_tables_from(reads.fetch(*policy_tables_sql()))


def _tables_stricter(
    profile: AgentProfile, policy: dict[str, Any] | None, rules: dict[str, bool] | None
) -> tuple[list[str], list[str]]:
    """The policy fields, and the tools with a rule row, where the tables are stricter than ``profile``:
    a lower threshold or customer limit, a longer window, the customer's Confirm asked, a tool's every
    call reviewed. (A looser table left behind the admin's back is not followed: loosening a rule is
    a version made in the admin.)"""
    values = policy_values(profile)
    fields = []
    if policy:
        table = PolicyValues(
            **{name: policy.get(name, getattr(values, name)) for name in POLICY_FIELDS}, currency=values.currency
        )
        if table.refund_threshold_cents < values.refund_threshold_cents:
            fields.append("refund_threshold_cents")
        if table.customer_limit < values.customer_limit:
            fields.append("customer_limit_cents")
        if table.customer_window_days > values.customer_window_days:
            fields.append("customer_window_days")
        if table.customer_confirms_refunds and not values.customer_confirms_refunds:
            fields.append("customer_confirms_refunds")
    tools = [
        t["name"] for t in profile.tools or [] if rules and rules.get(t["name"]) and not t.get("requires_approval")
    ]
    return fields, tools


def profile_for_new_run(active: AgentProfile | None = None, tables: Tables | None = None) -> AgentProfile:
    """The version a new run keeps: the active one; or, when the approval policy tables are stricter
    than it, the next version with their stricter values (the rest as the active version has it). The
    admin's pages make a version as they save; a rule tightened anywhere else (a shell, SQL, a data
    migration) made none, and new runs went on paying refunds the tables said staff must review.
    ``active``, ``tables``: the active version and the tables, when just read (in this pass, with the
    lease). One statement when the tables are not stricter, none when they were read."""
    profile = active or active_profile()
    if not any(_tables_stricter(profile, *(tables if tables is not None and active is not None else _tables_now()))):
        return profile
    with transaction.atomic():
        # Decided again under the lock a new version takes: two workers make one version, not two.
        AgentProfile.objects.select_for_update().order_by("-version").first()
        profile = active_profile()
        fields, tools = _tables_stricter(profile, *_tables_now())
        if not fields and not tools:
            return profile
        changed = ", ".join([*fields, *(f"the rule for {name}" for name in tools)])
        made = profile_follow_policy_tables(
            user=None, note=f"approval rules tightened outside the admin: {changed}"[:300],
            policy_fields=fields, tools=tools,
        )  # fmt: skip
    return made or profile


def profile_of(run: AgentRun) -> AgentProfile:
    """The version ``run`` is pinned to (a run started before profiles existed gets the active one)."""
    if run.profile_id is None:
        profile = active_profile()
        AgentRun.objects.filter(pk=run.pk, profile__isnull=True).update(profile=profile)
        run.profile = profile
    return run.profile


def policy_values(profile: AgentProfile) -> PolicyValues:
    """The profile's approval policy; values it does not name come from the model's defaults. Its currency
    is the version's own (every version names one: made so, or given the setting's by the migration that
    brought it in); only a version that still names none (restored from a bundle of a deployment from
    before) is read in APPROVAL_POLICY_CURRENCY's."""
    policy = profile.approval_policy or {}
    defaults = {name: ApprovalPolicy._meta.get_field(name).get_default() for name in POLICY_FIELDS}
    values = {**defaults, **{k: v for k, v in policy.items() if k in POLICY_FIELDS}}
    currency = str(policy.get(POLICY_CURRENCY) or settings.APPROVAL_POLICY_CURRENCY).lower()
    return PolicyValues(**values, currency=currency)


def enabled_tools(profile: AgentProfile) -> frozenset[str]:
    return frozenset(t["name"] for t in profile.tools or [] if t.get("name") in REGISTRY)


def enabled_tools_now(run_id: int) -> tuple[int | None, frozenset[str] | None]:
    """(version, the tools it enables) of the version ``run_id`` is on now, read afresh: staff may have
    moved a paused run to another version since its pass read it. (None, None) for a run on no version."""
    version, tools = AgentRun.objects.filter(pk=run_id).values_list("profile__version", "profile__tools").get()
    if version is None:
        return None, None
    return version, frozenset(t["name"] for t in tools or [] if t.get("name") in REGISTRY)


def not_enabled(name: str, version: int | None) -> str:
    return f"the tool {name} is not enabled for this agent (profile version {version})"


def tools_always_approved(profile: AgentProfile) -> frozenset[str]:
    return frozenset(t["name"] for t in profile.tools or [] if t.get("requires_approval"))


def profile_new_version(
    *, changes: dict[str, Any], user: AbstractBaseUser | None, note: str = "", activate: bool = True
) -> AgentProfile:
    """The next version: the active one with ``changes`` (any of CONTENT_FIELDS). The versions
    before it are not touched; runs pinned to them keep them."""
    unknown = set(changes) - set(CONTENT_FIELDS)
    if unknown:
        raise ValueError(f"not part of a profile: {', '.join(sorted(unknown))}")
    base = active_profile()
    with transaction.atomic():
        latest = AgentProfile.objects.select_for_update().order_by("-version").first()
        version = (latest.version if latest else 0) + 1
        content = {name: changes.get(name, getattr(base, name)) for name in CONTENT_FIELDS}
        content["approval_policy"] = policy_with_currency(content["approval_policy"])
        profile = AgentProfile.objects.create(version=version, note=note[:300], created_by=user, **content)
    if activate:
        profile = profile_activate(version=version, user=user)
    return profile


def profile_follow_policy_tables(
    *, user: AbstractBaseUser | None, note: str, policy_fields: Iterable[str] = (), tools: Iterable[str] = ()
) -> AgentProfile | None:
    """The next version, with what an operator just changed on the admin's ApprovalPolicy page
    (``policy_fields``) or ToolApprovalRule rows (``tools``), and everything else as the active version
    has it: editing one value there never undoes a rule set on the profile itself. A rule the tables
    hold stricter than the active version (tightened in a shell, not followed by a run yet) comes too:
    the version made here would otherwise make the tables follow it, and undo that rule unseen. None
    when nothing the agent uses changed."""
    base = active_profile()
    policy = ApprovalPolicy.current()
    stricter_fields, stricter_tools = _tables_stricter(base, *_tables_now())
    fields = [name for name in POLICY_FIELDS if name in {*policy_fields, *stricter_fields}]
    rules = dict(
        ToolApprovalRule.objects.filter(tool_name__in=[*tools, *stricter_tools]).values_list(
            "tool_name", "requires_approval"
        )
    )
    if not fields and not rules:
        return None
    approval_policy = {**(base.approval_policy or {}), **{name: getattr(policy, name) for name in fields}}
    tool_rules = [
        {**t, "requires_approval": rules.get(t["name"], t.get("requires_approval", False))} for t in base.tools
    ]
    if approval_policy == (base.approval_policy or {}) and tool_rules == base.tools:
        # The active version reads so already (the same page sent twice): no version that changes nothing.
        return None
    return profile_new_version(changes={"approval_policy": approval_policy, "tools": tool_rules}, user=user, note=note)


def _pending_tightening(previous: AgentProfile | None, profile: AgentProfile) -> tuple[set[str], set[str]]:
    """The rules the tables hold stricter than both the version that was active and ``profile``: tightened
    outside the admin and not followed by a run yet. Left in the tables when ``profile`` becomes active,
    so the next new run follows them (``profile_for_new_run``), not written over unseen."""
    if previous is None:
        return set(), set()
    row = _tables_now()
    (was_fields, was_tools), (now_fields, now_tools) = _tables_stricter(previous, *row), _tables_stricter(profile, *row)
    return set(was_fields) & set(now_fields), set(was_tools) & set(now_tools)


def _tables_follow(profile: AgentProfile, keep: tuple[set[str], set[str]] = (set(), set())) -> None:
    """The admin's ApprovalPolicy and ToolApprovalRule pages show the rules of the active version, but
    for the stricter rules ``keep`` (``_pending_tightening``)."""
    keep_fields, keep_tools = keep
    values = {
        name: value
        for name, value in (profile.approval_policy or {}).items()
        if name in POLICY_FIELDS and name not in keep_fields
    }
    policy = ApprovalPolicy.current()
    ApprovalPolicy.objects.filter(pk=policy.pk).update(**values)
    for tool in profile.tools or []:
        if tool["name"] in keep_tools:
            continue
        if tool.get("requires_approval"):
            ToolApprovalRule.objects.update_or_create(tool_name=tool["name"], defaults={"requires_approval": True})
        else:
            ToolApprovalRule.objects.filter(tool_name=tool["name"]).update(requires_approval=False)


class ActivationRefused(ValidationError):
    """Another version was made active since the page asking for this activation was read."""


def activation_refused_words(active: int, seen: int) -> str:
    return (
        f"Version {active} was made active since this list was read (it showed version {seen}). "
        "Reload the list, check the versions, and choose again. No version was made active."
    )


def profile_activate(*, version: int, user: AbstractBaseUser | None, active_seen: int | None = None) -> AgentProfile:
    """Make ``version`` the one new runs start with. ``active_seen``: the version the page asking for
    it showed active; another one made active since is refused (``ActivationRefused``), read under the
    rows' lock: made active over a version the person never saw, it undid that version's rules unseen."""
    with transaction.atomic():
        previous = profile_active_locked()
        if active_seen is not None and previous is not None and previous.version != active_seen:
            raise ActivationRefused(activation_refused_words(previous.version, active_seen), code="stale")
        AgentProfile.objects.select_for_update().filter(is_active=True).exclude(version=version).update(is_active=False)
        profile = AgentProfile.objects.select_for_update().get(version=version)
        if not profile.is_active:
            profile.is_active = True
            profile.save(update_fields=["is_active"])
        _tables_follow(profile, keep=_pending_tightening(previous, profile))
    return profile


def profile_diff(profile: AgentProfile, previous: AgentProfile | None = None) -> str:
    """What changed from the version before (or ``previous``), as a unified diff of its content."""
    if previous is None:
        previous = AgentProfile.objects.filter(version__lt=profile.version).order_by("-version").first()
    if previous is None:
        return ""

    def lines(p: AgentProfile) -> list[str]:
        content = {name: getattr(p, name) for name in CONTENT_FIELDS}
        return json.dumps(content, indent=2, sort_keys=True, default=str).splitlines()

    return "\n".join(
        difflib.unified_diff(
            lines(previous), lines(profile), f"v{previous.version}", f"v{profile.version}", lineterm=""
        )
    )


class MoveRefused(ValidationError):
    """The run keeps its version: moving it would change what its waiting calls need."""


def version_changed_words(active: int, seen: int) -> str:
    return (
        f"Version {active} was made active since this list was read (it showed version {seen}). "
        "Reload the list, check the version, and move the runs again."
    )


def profile_active_locked() -> AgentProfile | None:
    """The active version, its row held to the end of the transaction: an activation in flight lands
    first (and is read) or waits for this transaction. None when no version is active."""
    for _ in range(3):
        # An activation that committed while this waited for the row it read (then no longer active)
        # gives nothing: the next statement reads the version it made active. (Taken as "none is
        # active", a stale page's activation or save was made over the version it never saw.)
        found = AgentProfile.objects.select_for_update().filter(is_active=True).order_by("-version").first()
        if found is not None:
            return found
    return None


def _active_locked() -> AgentProfile:
    """``profile_active_locked``, or the active version made when none is."""
    return profile_active_locked() or active_profile()


def run_move_to_active(*, run: AgentRun, user: AbstractBaseUser | None, version_seen: int | None = None) -> bool:
    """Move a paused run to the active version, on its ticket's timeline. False if the run is
    not paused or is on the active version already. MoveRefused (with the reason) when the two
    versions' approval rules differ and the run has a call with an effect, recorded under its
    version's rules, that waits to run without a staff approval: the rules that decided it had
    no approval to wait for are the ones it runs under; and (code ``version_changed``) when
    ``version_seen``, the version the person was shown as active, is no longer the active one.
    The active version is read under the run's lock."""
    with transaction.atomic():
        locked = AgentRun.objects.select_for_update().get(pk=run.pk)
        target = _active_locked()
        if version_seen is not None and target.version != version_seen:
            raise MoveRefused(
                version_changed_words(target.version, version_seen) + f" Run {locked.pk} was not moved.",
                code="version_changed",
            )
        if locked.status not in PAUSED_RUN_STATUSES or locked.profile_id == target.pk:
            return False
        current = profile_of(locked)
        rules_differ = (tools_always_approved(current), policy_values(current)) != (
            tools_always_approved(target),
            policy_values(target),
        )
        unapproved = (
            ToolCall.objects.filter(run=locked)
            .exclude(status__in=FINAL_CALL_STATUSES)
            .exclude(replay_policy=ReplayPolicy.SAFE)
            .exclude(approval_decision=ApprovalDecision.APPROVED)
            .exclude(approval_required=True)
            .values_list("name", flat=True)
        )
        if rules_differ and unapproved:
            names = ", ".join(sorted(set(unapproved)))
            raise MoveRefused(
                f"Run {locked.pk} on ticket #{locked.ticket_id} stays on version {current.version}: version "
                f"{target.version} has other approval rules, and the run has a call ({names}) recorded under "
                f"version {current.version}'s rules that waits to run without a staff approval. Decide or "
                "cancel it first, or take the ticket over.",
                code="move_refused",
            )
        before = AgentProfile.objects.filter(pk=locked.profile_id).values_list("version", flat=True).first()
        AgentRun.objects.filter(pk=locked.pk).update(profile=target)
        ticket_services.event_append(
            ticket=locked.ticket_id,
            kind="agent_profile_changed",
            actor_kind=ActorKind.STAFF if user is not None else ActorKind.SYSTEM,
            actor_user=user,
            payload={"run_id": locked.pk, "from_version": before, "to_version": target.version},
        )
    run.profile = target
    return True
