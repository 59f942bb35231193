"""Rows as plain JSON values, and back: the same primary keys, users by username.

Every concrete column is carried except generated ones (the database computes them again).
Datetimes keep their microseconds and offset, so a restored row is the row that was exported.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import connection, models
from django.db.models import Field, Model, QuerySet
from django.utils.dateparse import parse_date, parse_datetime

from state.parts import is_user_model
from support.storable import unstorable

Row = dict[str, Any]


def columns(model: type[Model]) -> list[Field]:
    return [f for f in model._meta.concrete_fields if not getattr(f, "generated", False)]


def unique_columns(model: type[Model]) -> list[Field]:
    """The columns no two rows may share, other than the primary key: ``unique=True`` fields and
    fields a unique constraint of their own (no condition) covers alone."""
    alone = {
        c.fields[0]
        for c in model._meta.constraints
        if isinstance(c, models.UniqueConstraint) and len(c.fields) == 1 and c.condition is None
    }
    return [f for f in columns(model) if not f.primary_key and (f.unique or f.name in alone)]


def is_user_column(field: Field) -> bool:
    return bool(field.is_relation and is_user_model(field.related_model))


def key_of(field: Field) -> str:
    """The row's key for a column: ``ticket_id`` for a foreign key, ``decided_by`` for a user (a username)."""
    return field.name if is_user_column(field) else field.attname


def encode(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, Decimal | uuid.UUID):
        return str(value)
    return value


def decode(field: Field, value: Any) -> Any:
    if value is None or isinstance(field, models.JSONField):
        return value
    if isinstance(field, models.DateTimeField):
        return parse_datetime(value)
    if isinstance(field, models.DateField):
        return parse_date(value)
    return field.to_python(value)


def dump(queryset: QuerySet) -> list[Row]:
    """The queryset's rows, in primary-key order, as JSON values."""
    model = queryset.model
    fields = columns(model)
    raw = list(queryset.order_by("pk").values(*[f.attname for f in fields]))
    user_ids = {r[f.attname] for r in raw for f in fields if is_user_column(f) and r[f.attname] is not None}
    usernames = dict(get_user_model().objects.filter(pk__in=user_ids).values_list("pk", "username"))
    rows = []
    for r in raw:
        row: Row = {}
        for f in fields:
            value = r[f.attname]
            row[key_of(f)] = usernames.get(value) if is_user_column(f) and value is not None else encode(value)
        rows.append(row)
    return rows


def instance(model: type[Model], row: Row, user_ids: dict[str, int]) -> Model:
    """A model instance of ``row``; usernames become the ids of ``user_ids``."""
    values: dict[str, Any] = {}
    for f in columns(model):
        key = key_of(f)
        if key not in row:
            continue  # a column added since the bundle was written takes its default
        value = row[key]
        values[f.attname] = user_ids[value] if is_user_column(f) and value is not None else decode(f, value)
    return model(**values)


def unknown_keys(model: type[Model], row: Row) -> set[str]:
    return set(row) - {key_of(f) for f in columns(model)}


# The keys of a user row, by the bundle's format version: 2 added the rights a user holds of their own.
USER_KEYS = {
    1: ("username", "is_staff", "is_active", "groups"),
    2: ("username", "is_staff", "is_active", "groups", "is_superuser", "permissions"),
    3: ("username", "is_staff", "is_active", "groups", "is_superuser", "permissions"),  # 3 added the signature
}


def user_rows(usernames: set[str]) -> list[Row]:
    """What restore needs of each user: the name, whether staff, superuser and active, the groups by
    name and their own permissions as ``app_label.codename``."""
    users = (
        get_user_model()
        .objects.filter(username__in=usernames)
        .prefetch_related("groups", "user_permissions__content_type")
        .order_by("username")
    )
    return [
        {
            "username": user.username,
            "is_staff": user.is_staff,
            "is_superuser": user.is_superuser,
            "is_active": user.is_active,
            "groups": sorted(g.name for g in user.groups.all()),
            "permissions": sorted(f"{p.content_type.app_label}.{p.codename}" for p in user.user_permissions.all()),
        }
        for user in users
    ]


def user_rights(row: Row) -> list[str]:
    """The rights restore gives the login it creates from a user row (checked by ``user_row_problems``):
    superuser, staff status, its groups, its own permissions."""
    return [
        *(["superuser"] if row.get("is_superuser") else []),
        *(["staff status"] if row["is_staff"] else []),
        *(f"group {name}" for name in row["groups"]),
        *row.get("permissions", []),
    ]


def is_permission_name(value: Any) -> bool:
    """``app_label.codename``, as a user row names a permission."""
    return isinstance(value, str) and value.count(".") == 1 and all(value.split(".")) and "\x00" not in value


def user_row_problems(row: Any, *, format_version: int) -> list[str]:
    """Why ``row`` cannot be a user row of a bundle of that format (``user_rows``): empty when it can."""
    if not isinstance(row, dict):
        return [f"auth.User: a row that is not an object ({type(row).__name__})"]
    where = f"auth.User {row.get('username')!r}"
    field = get_user_model()._meta.get_field(get_user_model().USERNAME_FIELD)
    username = row.get("username")
    problems = []
    keys = USER_KEYS[format_version]
    if set(row) != set(keys):
        problems.append(f"{where}: its keys are {sorted(map(str, row))}, not {', '.join(keys)}")
    if not isinstance(username, str) or not username or len(username) > field.max_length or "\x00" in username:
        problems.append(f"{where}: the username is not a name of at most {field.max_length} characters")
    for flag in ("is_staff", "is_active", "is_superuser"):
        if flag in row and not isinstance(row[flag], bool):
            problems.append(f"{where}: {flag} is {row[flag]!r}, not true or false")
    groups = row.get("groups")
    if "groups" in row and not (isinstance(groups, list) and all(isinstance(g, str) for g in groups)):
        problems.append(f"{where}: groups is not a list of group names")
    permissions = row.get("permissions")
    if "permissions" in row and not (isinstance(permissions, list) and all(map(is_permission_name, permissions))):
        problems.append(f"{where}: permissions is not a list of permissions named app_label.codename")
    return problems


# What a JSON column holds, where the product reads it as such (a call's arguments as an object):
# a column whose default is an object or a list holds one; these say so without a default.
JSON_KINDS: dict[str, type] = {"approvals.ApprovalRequest.arguments": dict}


def _json_kind(field: Field) -> type | None:
    if not isinstance(field, models.JSONField):
        return None
    return JSON_KINDS.get(f"{field.model._meta.label}.{field.name}") or (
        field.default if field.default in (dict, list) else None
    )


def _json_types(field: Field) -> tuple[type, ...] | None:
    """The JSON types ``dump`` writes for the column's values (None: any, a JSON column). A value of
    another type would be converted on the way in (1.5 cents to 1, true to 1, "12" to 12) or fail."""
    if isinstance(field, models.JSONField):
        return None
    internal = (field.target_field if field.is_relation else field).get_internal_type()
    if internal == "BooleanField":
        return (bool,)
    if internal.endswith(("IntegerField", "AutoField")):
        return (int,)
    if internal == "FloatField":
        return (int, float)
    return (str,)  # text, and what ``encode`` writes as text (dates and times, decimals, UUIDs)


def row_problems(model: type[Model], row: Row, *, required: Iterable[str] = ()) -> list[str]:
    """Why ``row`` cannot be a row of ``model`` in this database (empty when it can): each value
    must be one its column takes (its type, length, choices, integer range), and each column of
    ``required`` (by its row key) must be there, checked before anything is written, so a forged
    or damaged bundle is refused with the reason."""
    label = model._meta.label
    pk_key = model._meta.pk.attname
    if row.get(pk_key) is None:
        return [f"{label}: a row without its {pk_key}"]
    where = f"{label} {row[pk_key]!r}"
    problems = []
    left_out = sorted(set(required) - set(row))
    if left_out:
        problems.append(
            f"{where}: no {', '.join(left_out)}, which its table had at the bundle's migrations (an edited row)"
        )
    for f in columns(model):
        key = key_of(f)
        if key not in row:
            continue
        value = row[key]
        if value is None:
            if not f.null:
                problems.append(f"{where}: {f.name} is empty, which its column does not allow")
            continue
        if is_user_column(f):
            if not isinstance(value, str):
                problems.append(f"{where}: {f.name} must name a user")
            continue
        types = _json_types(f)
        if types is not None and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
            problems.append(f"{where}: {f.name} = {value!r:.60} is not a value of its column")
            continue
        unfit = unstorable(value)
        if unfit:
            problems.append(f"{where}: {f.name} {unfit}, which the database cannot hold")
            continue
        try:
            python = decode(f, value)
        except (ValidationError, ValueError, TypeError, OverflowError):
            python = None
        if python is None:
            problems.append(f"{where}: {f.name} = {value!r:.60} is not a value of its column")
            continue
        kind = _json_kind(f)
        if kind is not None and not isinstance(python, kind):
            problems.append(f"{where}: {f.name} = {value!r:.60} is not a JSON {'object' if kind is dict else 'array'}")
            continue
        if f.choices and python not in {choice for choice, _ in f.flatchoices}:
            problems.append(f"{where}: {f.name} = {value!r:.60} is not one of its choices")
        if getattr(f, "max_length", None) and isinstance(python, str) and len(python) > f.max_length:
            problems.append(f"{where}: {f.name} is longer than its {f.max_length} characters")
        internal = f.get_internal_type()
        if isinstance(python, int) and internal.endswith(("IntegerField", "AutoField")):
            low, high = connection.ops.integer_field_range(internal)
            if internal.endswith("AutoField"):
                low = 1  # a key the database numbers: its sequence starts at 1
            if (low is not None and python < low) or (high is not None and python > high):
                problems.append(f"{where}: {f.name} = {value!r:.60} is out of its column's range")
    return problems
