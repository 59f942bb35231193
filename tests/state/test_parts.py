"""The bundle's declared parts cover the ledger: a table added to an app without a part here fails."""

from __future__ import annotations

from django.apps import apps

from agents.profiles import CONTENT_FIELDS
from state.parts import PARTS, is_user_model, part_named

LEDGER_APPS = ("tickets", "agents", "approvals", "payments", "staff")


def test_every_table_of_the_ledger_apps_is_a_part_of_the_bundle():
    bundled = {part.label for part in PARTS}
    tables = {m._meta.label for app in LEDGER_APPS for m in apps.get_app_config(app).get_models()}
    assert tables - bundled == set(), "add these tables to state.parts.PARTS"


def test_every_reference_of_a_bundled_row_points_into_the_bundle_or_at_a_user():
    bundled = {part.label for part in PARTS}
    outside = [
        f"{part.label}.{field.name} -> {field.related_model._meta.label}"
        for part in PARTS
        for field in part.model._meta.concrete_fields
        if field.is_relation
        and not is_user_model(field.related_model)
        and field.related_model._meta.label not in bundled
    ]
    assert outside == []


def test_a_part_comes_after_the_parts_its_rows_point_at():
    seen: set[str] = set()
    for part in PARTS:
        for field in part.model._meta.concrete_fields:
            target = field.related_model._meta.label if field.is_relation else None
            if target and not is_user_model(field.related_model) and target != part.label:
                assert target in seen, f"{part.label} points at {target}, which comes later"
        seen.add(part.label)


def test_every_ticket_row_says_which_ticket_it_belongs_to():
    for part in PARTS:
        if not part.shared:
            assert part.ticket_column or part.via, part.label


def test_a_profile_version_is_compared_on_every_column_but_its_record_and_whether_it_is_active():
    part = part_named("agents.AgentProfile")
    ignored = {*part.mutable, *part.bookkeeping}
    compared = {f.name for f in part.model._meta.concrete_fields} - ignored
    assert compared == {"id", "version", *CONTENT_FIELDS}, "a new column: what the agent is, or a record of it?"
