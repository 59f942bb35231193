"""Customers' personal data, and the secrets of the deployment: what a bundle leaves out.

Personal data of a customer, replaced unless the export is asked to include it:
- who they are: name, email and login name, replaced by stable pseudonyms derived from the
  customer's id (``Customer 7``, ``customer-7@pseudonymised.invalid``) wherever they appear
  in the bundle (the agent's prompt names the customer, a reply may greet them);
- what they wrote: their messages, the subjects of their tickets and the names of their
  files, withheld wherever the bundle repeats them word for word (the model's requests
  quote the conversation, the timeline quotes messages), the earlier ones too (a subject a
  person edited since, a rating's comment given again: ``EARLIER_WORDS``). A message too
  short to be hunted inside other sentences (a postcode, a passcode) is withheld where a
  value of the columns in ``QUOTE_COLUMNS`` is that message whole: its timeline event, the
  customer's turn in a model request (with the lines naming its files), the model's tool
  call arguments. There a value that is a part of what the customer wrote on the ticket (a
  model's quote cut short) is withheld too.
  A short detail they gave (a passcode, a postcode, a flat or phone number: a word with a digit
  in it; an email address they typed: ``_details``), alone or inside a sentence, is hunted
  wherever the bundle repeats it as a word of its own, in anyone's words; the bundle's order
  numbers are not.
Kept: order numbers, amounts and statuses, the agent's and staff's own words, tool
arguments and results (a reply may still say in other words what the customer wrote).

Only the columns declared in ``WORDS_COLUMNS`` and ``RECORD_COLUMNS`` are searched (a JSON value that
is itself JSON, as a model's tool call arguments are, is searched as decoded). A record (a run's
outcome, a call's error) mixes the product's markers, which the money rules look up again ("a person
took the ticket over", "not run": ``MARKERS``), with words it quotes (a tool's error names what the
model passed): the markers are kept whatever the customer wrote, the rest is searched. Codes are never
rewritten: choice columns (a status, a decision), keys and names of things (an event's kind), the
columns in ``CODE_COLUMNS``, a JSON value under a key in ``CODE_KEYS``, and users. A user is carried
by login; a customer's login is replaced by their pseudonym by the customer's id, and no one else's is
changed (a staff member called ``sam`` stays ``sam`` when a customer is called Sam).

Secrets are never carried at all: a value of any setting in ``SECRET_SETTINGS`` found in
any row is replaced by ``[withheld: NAME]``; the manifest lists the names only.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlparse

from django.apps import apps
from django.conf import settings
from django.db import connection, models
from django.db.models import Field

from agents.calls import CRASHED_PREFIX, arguments_digest
from agents.conversation import ATTACHED_LINE, customer_named
from agents.models import NOT_RUN, PERSON_TOOK_OVER
from state.parts import part_named
from state.rows import Row, columns, is_user_column, key_of
from state.terms import replacer
from tickets.attachments import EXTENSIONS

PSEUDONYM_DOMAIN = "pseudonymised.invalid"
WITHHELD_WORDS = "[withheld: the customer's words]"
WITHHELD_SUBJECT = "[withheld: the ticket's subject]"
# Shorter texts are withheld in their own row but not hunted for inside other texts: "ok" or "yes"
# would be cut out of every sentence (``QUOTE_COLUMNS`` says where they are withheld whole).
MIN_QUOTED_CHARS = 8
# The tool that emails the customer: its result names the address it sent to (agents.tools).
EMAIL_TOOL = "notify_customer_by_email"
# JSON keys whose values are codes the product compares or reads back, never anyone's words: a
# confirmation's digest and decision, an event's statuses, a model message's role and call ids.
CODE_KEYS = frozenset(
    {
        "author_kind",
        "call_id",
        "client_msg_id",
        "currency",
        "decision",
        "digest",
        "expires_at",
        "finish_reason",
        "id",
        "kind",
        "role",
        "status",
        "stream",
        "tool",
        "tool_call_id",
        "type",
    }
)
# The text and JSON columns of the personal parts, each declared once: someone's words (searched), the
# product's records (searched around their markers) or its codes (never changed). A customer who once
# wrote "a person" or "the ticket" must not rewrite the record of a person's stop of a refund; a new
# column goes in one of them (tests/state/test_pseudonymised_bundle_keeps_the_products_records.py checks).
WORDS_COLUMNS: dict[str, frozenset[str]] = {
    "tickets.Message": frozenset({"body"}),
    "tickets.TicketRating": frozenset({"comment"}),
    "tickets.TicketEvent": frozenset({"payload"}),
    "agents.ModelStep": frozenset({"request_messages", "response_text", "tool_calls"}),
    "agents.ToolCall": frozenset({"arguments", "result", "approval_reason", "approval_note", "confirmation_text"}),
    "agents.Refund": frozenset({"reason"}),
    "approvals.ApprovalRequest": frozenset({"arguments", "reason", "agent_reasoning", "evidence", "note"}),
}
# Of those, the columns that repeat a customer's message whole (the message's timeline event, the
# customer's turns in a model request) or quote it, whole or cut short (the model's tool call arguments:
# a search for what the customer wrote, a refund's reason): there a value that is a short message, or a
# part of what the customer wrote on the ticket, is withheld.
QUOTE_COLUMNS: dict[str, frozenset[str]] = {
    "tickets.TicketEvent": frozenset({"payload"}),
    "agents.ModelStep": frozenset({"request_messages", "tool_calls"}),
    "agents.ToolCall": frozenset({"arguments"}),
    "approvals.ApprovalRequest": frozenset({"arguments"}),
    "agents.Refund": frozenset({"reason"}),
}
RECORD_COLUMNS: dict[str, frozenset[str]] = {
    "agents.AgentRun": frozenset({"outcome", "last_error"}),
    "agents.ModelStep": frozenset({"error"}),
    "agents.ToolCall": frozenset({"error"}),
    "agents.Refund": frozenset({"error"}),
}
CODE_COLUMNS: dict[str, frozenset[str]] = {
    "agents.AgentRun": frozenset({"input_message_ids", "epochs", "recovery_notes"}),
    "agents.ToolCall": frozenset({"approval_provider_seen"}),  # the provider's refund ids an approval's card showed
}
# What the product writes into its records and finds them by again (agents.refunds, agents.calls,
# agents.confirmation, approvals.services): never changed, whatever the customer wrote.
MARKERS = (PERSON_TOOK_OVER, CRASHED_PREFIX, NOT_RUN)
_MARKER = re.compile("(" + "|".join(re.escape(m) for m in sorted(MARKERS, key=len, reverse=True)) + ")")
# Keys that are codes at the top of an event's payload (a status change's statuses) but may hold
# words further in (an edit's subject, from and to).
TOP_CODE_KEYS = frozenset({"from", "to"})
# The events whose payloads have them (a tool's result may not: the email tool's "to" is an address).
EVENTS_LABEL = "tickets.TicketEvent"

SECRET_SETTINGS = (
    "SECRET_KEY",
    "STRIPE_API_KEY",
    "OPENAI_API_KEY",
    "EMAIL_HOST_PASSWORD",
    "DATABASE_URL",
    "SANDBOX_DATABASE_URL",
    "REDIS_URL",
    "CELERY_BROKER_URL",
    "MEDIA_STORAGE_OPTIONS",
    "STATE_BUNDLE_KEY",
)
MIN_SECRET_CHARS = 8
# A profile version's model parameters go to the model endpoint with every request: besides how to
# generate (carried by value, below), what the endpoint needs of the deployment (extra headers or a
# body with a key, the options of a class of one's own). Those are carried by name only, their value
# withheld: a restore asks the operator for them (``state.restore``).
CARRIED_MODEL_PARAMETERS = frozenset(
    {
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "n",
        "parallel_tool_calls",
        "presence_penalty",
        "reasoning_effort",
        "response_format",
        "seed",
        "stop",
        "temperature",
        "top_logprobs",
        "top_p",
    }
)
WITHHELD_PARAMETER = "[withheld: a model parameter, not carried by a bundle]"
PROFILE_LABEL = "agents.AgentProfile"


def pseudonym_name(customer_id: int) -> str:
    return f"Customer {customer_id}"


def pseudonym_email(customer_id: int) -> str:
    return f"customer-{customer_id}@{PSEUDONYM_DOMAIN}"


def pseudonym_username(customer_id: int) -> str:
    return f"pseudonymised-customer-{customer_id}"


Path = tuple[str, ...]


def _walk(value: Any, change: Callable[[str], str], keep: Callable[[Path, Any], bool] | None = None) -> Any:
    """``value`` with ``change`` applied to every string in it, except a dict's values ``keep`` says
    to leave as they are (by their keys from the top of ``value``). A string that is a JSON object
    or array is changed as decoded, and encoded again only if something in it changed."""
    return _walked(value, change, keep, ())


def _walked(value: Any, change: Callable[[str], str], keep: Callable[[Path, Any], bool] | None, path: Path) -> Any:
    if isinstance(value, str):
        changed = change(value)
        embedded = _embedded_json(changed)
        if embedded is None:
            return changed
        # Its own document: keys are counted from its top, as in a JSON column.
        walked = _walked(embedded, change, keep, ())
        return changed if walked == embedded else json.dumps(walked)
    if isinstance(value, list):
        return [_walked(v, change, keep, path) for v in value]
    if isinstance(value, dict):
        return {
            k: v if keep is not None and keep((*path, k), v) else _walked(v, change, keep, (*path, k))
            for k, v in value.items()
        }
    return value


def _embedded_json(text: str) -> dict | list | None:
    """The object or array ``text`` encodes (a model's tool call arguments), or None. Escaped there
    (an accent as ``\\u00e8``, a quote as ``\\"``), a customer's words would not be found verbatim."""
    if text[:1] not in ("{", "["):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict | list) else None


def free_text(field: Field) -> bool:
    """Can the column hold anyone's words? Text and JSON columns; not a choice, a key or a name.
    Each of the personal parts' is declared in ``WORDS_COLUMNS``, ``RECORD_COLUMNS`` or ``CODE_COLUMNS``."""
    return isinstance(field, models.TextField | models.JSONField) and not field.choices


def _alternating(pieces: list[str]) -> Iterable[tuple[bool, str]]:
    return ((n % 2 == 1, piece) for n, piece in enumerate(pieces))


def _product_words() -> frozenset[str]:
    """Names the product itself writes: its tools and the keys of its structured values."""
    from agents.tools import REGISTRY

    return frozenset(REGISTRY) | CODE_KEYS | TOP_CODE_KEYS


def _add_name(identities: dict[str, str], short_names: dict[str, str], name: str, customer_id: int) -> None:
    """A customer's name, and each word of it, to be replaced by their pseudonym: a word of three
    letters or more in any case, a shorter one ("Bo", "Li") only as written, a word of its own."""
    identities[name] = pseudonym_name(customer_id)
    for token in name.split():
        if len(token) >= 3:
            identities.setdefault(token, pseudonym_name(customer_id))
        elif len(token) == 2 and token[0].isupper():
            short_names.setdefault(token, pseudonym_name(customer_id))


# A detail a customer gives in a few characters (a passcode "4821-9", a postcode "E1 6AN", a flat "3B", a
# phone number): a word with a digit in it, its pieces joined by a hyphen or a slash. Under eight characters
# it is no phrase to hunt, but no common word either: it is hunted wherever the bundle repeats it, as a word
# of its own. Not a number of one to three digits (a quantity, a day, the pieces of an amount: "49.99"), and
# not one of the bundle's order numbers (the money rules find earlier requests by them).
# An email address they typed (not the one on their record, which is pseudonymised as their identity) is
# such a detail too, whatever its characters.
_DETAIL = re.compile(r"\w+(?:[-/]\w+)*")
_ADDRESS = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
MIN_DETAIL_DIGITS = 4


def _details(text: str) -> Iterable[str]:
    """The details in what a customer wrote that are hunted as words of their own."""
    yield from (address.strip(".") for address in _ADDRESS.findall(text))
    for word in _DETAIL.findall(text):
        if any(c.isdigit() for c in word) and not (word.isdigit() and len(word) < MIN_DETAIL_DIGITS):
            yield word


# Events that keep what a customer wrote after their ticket shows something else: the subject they
# opened it with (a person may edit it since: both are the ticket's subject), each comment of a rating
# given again. By kind: where in the payload, and what it is withheld as.
EARLIER_WORDS: dict[str, tuple[tuple[tuple[str, ...], str], ...]] = {
    "ticket_opened": ((("subject",), WITHHELD_SUBJECT),),
    "edited": ((("subject", "from"), WITHHELD_SUBJECT), (("subject", "to"), WITHHELD_SUBJECT)),
    "rated": ((("comment",), WITHHELD_WORDS),),
}


# A file's name as a bundle gave it: ``file-7``, or with what a release before kept of its extension.
_PSEUDONYMISED_FILE = re.compile(r"file-(\d+)(?:\.[^\W_]+)?")


def _pseudonymised_file(name: str, attachment_id: Any) -> bool:
    matched = _PSEUDONYMISED_FILE.fullmatch(name)
    return matched is not None and matched.group(1) == str(attachment_id)


def _earlier_words(event: Row) -> Iterable[tuple[str, str]]:
    """The customer's words an event of ``EARLIER_WORDS`` keeps, each with what it is withheld as."""
    for path, withheld in EARLIER_WORDS.get(event.get("kind"), ()):
        value: Any = event.get("payload")
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, str) and value.strip():
            yield value, withheld


def pseudonymise(
    rows: dict[str, list[Row]],
    users: list[Row],
    *,
    personal_labels: Iterable[str],
    quoted_from: dict[str, set[Any]] | None = None,
) -> None:
    """Replace the customers' personal data in ``rows`` (by part label) and ``users``, in place.

    Idempotent: a customer already pseudonymised (a restored pseudonymised bundle) is left as it is,
    so a database restored from a bundle dumps to the same rows. ``quoted_from``: the only rows (ids
    by label) whose words are withheld wherever else they are quoted; every row's words are still
    withheld in the row itself. Verify reads a database against its bundle so: a customer's "Thank you"
    written since the bundle does not rewrite a staff reply restored from it ("Thank you for waiting").
    """

    def hunted(label: str, row: Row) -> bool:
        return quoted_from is None or row.get("id") in quoted_from.get(label, ())

    identities: dict[str, str] = {}
    short_names: dict[str, str] = {}  # words of a name too short to replace in any case ("Li" in "lid")
    details: dict[str, str] = {}  # short details inside what the customer wrote (``_details``)
    logins: dict[str, str] = {}
    texts: dict[str, str] = {}
    whole: dict[str, str] = {}  # texts too short to hunt inside others, withheld where a value is one of them
    short_texts: dict[str, str] = {}  # a short subject or comment: withheld in its row, its details hunted
    said: dict[Any, list[str]] = {}  # by ticket: what the customer wrote there, in order
    for customer in rows.get("tickets.Customer", []):
        if customer["email"].endswith("@" + PSEUDONYM_DOMAIN):
            continue
        pk = customer["id"]
        _add_name(identities, short_names, customer["name"], pk)
        identities[customer["email"]] = pseudonym_email(pk)
        identities.setdefault(customer["user"], pseudonym_username(pk))
        logins[customer["user"]] = pseudonym_username(pk)
        customer.update(name=pseudonym_name(pk), email=pseudonym_email(pk), user=pseudonym_username(pk))
    # The name a customer had when the agent was told it (a person may have corrected it since): the
    # agent's instructions name the customer, and its replies may greet them by it.
    customer_of = {ticket["id"]: ticket["customer_id"] for ticket in rows.get("tickets.Ticket", [])}
    for step in rows.get("agents.ModelStep", []):
        pk = customer_of.get(step.get("ticket_id"))
        for message in step.get("request_messages") or []:
            if pk is None or not isinstance(message, dict) or message.get("role") != "system":
                continue
            name = customer_named(message["content"]) if isinstance(message.get("content"), str) else None
            if name and name not in identities and name != pseudonym_name(pk) and hunted("agents.ModelStep", step):
                _add_name(identities, short_names, name, pk)
    # The address the email tool sent to, which a person may have corrected on the customer since.
    for call in rows.get("agents.ToolCall", []):
        pk = customer_of.get(call.get("ticket_id"))
        result = call.get("result")
        address = result.get("to") if call.get("name") == EMAIL_TOOL and isinstance(result, dict) else None
        if pk is not None and isinstance(address, str) and address and address != pseudonym_email(pk):
            if hunted("agents.ToolCall", call):
                identities.setdefault(address, pseudonym_email(pk))
    # A message that is only an order number ("ORD-24010", the answer to "which order?") is withheld
    # as a message, but an order number is kept wherever else it is (a refund call's arguments: what a
    # person's stop of a refund on that order is found by).
    order_numbers = {str(order["number"]).strip().upper() for order in rows.get("tickets.Order", [])}
    for message in rows.get("tickets.Message", []):
        if message["author_kind"] == "customer" and message["body"] != WITHHELD_WORDS:
            words = message["body"].strip()
            if words and hunted("tickets.Message", message):
                said.setdefault(message.get("ticket_id"), []).append(message["body"])
                if words.upper() not in order_numbers:
                    long_enough = len(message["body"]) >= MIN_QUOTED_CHARS
                    (texts if long_enough else whole)[message["body"]] = WITHHELD_WORDS
            message["body"] = WITHHELD_WORDS
    for rating in rows.get("tickets.TicketRating", []):
        if rating["comment"] and rating["comment"] != WITHHELD_WORDS:
            if hunted("tickets.TicketRating", rating):
                (texts if len(rating["comment"]) >= MIN_QUOTED_CHARS else short_texts)[rating["comment"]] = (
                    WITHHELD_WORDS
                )
            rating["comment"] = WITHHELD_WORDS
    for ticket in rows.get("tickets.Ticket", []):
        if ticket["subject"] != WITHHELD_SUBJECT:
            if hunted("tickets.Ticket", ticket):
                (texts if len(ticket["subject"]) >= MIN_QUOTED_CHARS else short_texts)[ticket["subject"]] = (
                    WITHHELD_SUBJECT
                )
            ticket["subject"] = WITHHELD_SUBJECT
    for event in rows.get("tickets.TicketEvent", []):
        for words, withheld in _earlier_words(event):
            if words not in (WITHHELD_WORDS, WITHHELD_SUBJECT) and hunted("tickets.TicketEvent", event):
                (texts if len(words) >= MIN_QUOTED_CHARS else whole).setdefault(words, withheld)
    # A file's name is changed where it stands as a name of its own ("IMG_2041.jpg" in "[attached:
    # IMG_2041.jpg ...]"), not inside other words: a photo named "refund" or "order_number" must not
    # rewrite the agent's tool names, its words or the keys of its arguments.
    file_names: dict[str, str] = {}
    for attachment in rows.get("tickets.Attachment", []):
        name = attachment["original_name"]
        # Ending as a download of it does, in the extension of what the file is: what followed the last dot
        # of the customer's name for it may be anything of theirs ("passport.Okonkwo", a phone number).
        anonymous = f"file-{attachment['id']}{EXTENSIONS.get(attachment.get('content_type'), '')}"
        if name != anonymous and not _pseudonymised_file(name, attachment["id"]):
            if (
                len(name) >= MIN_QUOTED_CHARS
                and name not in _product_words()
                and hunted("tickets.Attachment", attachment)
            ):
                file_names[name] = anonymous
            attachment["original_name"] = anonymous
    if not identities and not texts and not whole and not short_texts and not said and not file_names:
        return
    said_on = {ticket: "\n".join(bodies) for ticket, bodies in said.items()}

    def quotes_them(text: str, words: str) -> bool:
        """Is ``text`` a part of the customer's ``words`` (a quote cut short), long enough to be theirs and
        not an order number?"""
        part = text.strip()
        return len(part) >= MIN_QUOTED_CHARS and part in words and part.upper() not in order_numbers

    # A tool call's argument that quotes the customer cut short is hunted wherever else it is repeated,
    # inside other words too (a hand-off's note: "Handed off to a person: <its reason>"). Phrases only: a
    # single word the model searched for ("shipping") is not cut out of every sentence of the agent's.
    for call in rows.get("agents.ToolCall", []):
        words = said_on.get(call.get("ticket_id"), "")
        arguments = call.get("arguments")
        for value in (arguments or {}).values() if isinstance(arguments, dict) else ():
            if isinstance(value, str) and len(value.split()) > 1 and quotes_them(value, words):
                texts.setdefault(value.strip(), WITHHELD_WORDS)
    for words in [*texts, *whole, *short_texts]:
        for detail in _details(words):
            if detail.upper() not in order_numbers:
                details.setdefault(detail, WITHHELD_WORDS)
    users[:] = [{**user, "username": logins.get(user["username"], user["username"])} for user in users]
    quoted = replacer(texts, words=False, ignore_case=False)
    files = replacer(file_names, words=True, ignore_case=False)
    named = replacer(identities, words=True, ignore_case=True)
    named_short = replacer(short_names, words=True, ignore_case=False)
    detailed = replacer(details, words=True, ignore_case=True, joiners="-/")

    def whole_message(text: str) -> str:
        # A customer's turn in a model request is the message, then a line per file it came with.
        message, attached, rest = text.partition("\n" + ATTACHED_LINE)
        return whole[message] + attached + rest if message in whole else text

    def change(text: str) -> str:
        # The details last: a phrase of the customer's is withheld whole first, not cut into pieces.
        return detailed(named_short(named(files(quoted(text)))))

    def quotes_changed(ticket: Any) -> Callable[[str], str]:
        words = said_on.get(ticket, "")

        def change_quotes_too(text: str) -> str:
            text = whole_message(text)
            return WITHHELD_WORDS if quotes_them(text, words) else change(text)

        return change_quotes_too

    def change_around_markers(text: str) -> str:
        # split() with a group: the markers at the odd places, the text between them at the even.
        pieces = _MARKER.split(text)
        return "".join(piece if odd else change(piece) for odd, piece in _alternating(pieces))

    # An order number in arguments and results is what the money rules find earlier requests by (a
    # person's stop, a second refund on the order): kept as it is when it is one of the bundle's orders,
    # whatever customer's words it happens to equal. Anything else there is changed as everywhere.
    def keep(path: Path, value: Any) -> bool:
        key = path[-1]
        if key == "order_number":
            return isinstance(value, str) and value.strip().upper() in order_numbers
        return key in CODE_KEYS

    def keep_in_events(path: Path, value: Any) -> bool:
        return keep(path, value) or (len(path) == 1 and path[-1] in TOP_CODE_KEYS)

    for label in personal_labels:
        fields = columns(apps.get_model(label))
        words_at = sorted(WORDS_COLUMNS.get(label, ()))
        keeping = keep_in_events if label == EVENTS_LABEL else keep
        quotes_at = QUOTE_COLUMNS.get(label, frozenset())
        records_at = sorted(RECORD_COLUMNS.get(label, ()))
        users_at = [key_of(f) for f in fields if is_user_column(f)]
        ticket_at = part_named(label).ticket_column
        for row in rows.get(label, []):
            change_quotes_too = quotes_changed(row.get(ticket_at)) if quotes_at and ticket_at else change
            for key in words_at:
                if key in row:
                    row[key] = _walk(row[key], change_quotes_too if key in quotes_at else change, keeping)
            for key in records_at:
                if isinstance(row.get(key), str):
                    row[key] = change_around_markers(row[key])
            for key in users_at:
                if row.get(key) is not None:
                    row[key] = logins.get(row[key], row[key])


def secret_values() -> dict[str, str]:
    """The values to keep out of a bundle, by the setting they come from."""
    found: dict[str, str] = {}
    for name in SECRET_SETTINGS:
        value = getattr(settings, name, None) or os.environ.get(name)
        if name == "MEDIA_STORAGE_OPTIONS":  # kept by settings as the storage's options
            value = settings.STORAGES.get("default", {}).get("OPTIONS") or value
        if isinstance(value, dict):
            for item in value.values():
                if isinstance(item, str):
                    found.setdefault(str(item), name)
        elif value:
            found[str(value)] = name
        for part in _url_secrets(str(value)) if isinstance(value, str) else ():
            found.setdefault(part, name)
    password = connection.settings_dict.get("PASSWORD")
    if password:
        found.setdefault(str(password), "DATABASE_URL")
    return {value: name for value, name in found.items() if len(value) >= MIN_SECRET_CHARS}


def _url_secrets(value: str) -> list[str]:
    if "://" not in value:
        return []
    try:
        parsed = urlparse(value)
    except ValueError:
        return []
    return [parsed.password] if parsed.password else []


def withhold_secrets(rows: dict[str, list[Row]], users: list[Row]) -> Counter[str]:
    """Replace every secret value found in the rows by ``[withheld: NAME]``; count them by name."""
    secrets = secret_values()
    seen: Counter[str] = Counter()
    if not secrets:
        return seen
    pattern = re.compile("|".join(re.escape(v) for v in sorted(secrets, key=lambda v: (-len(v), v))))

    def change(text: str) -> str:
        def one(match: re.Match[str]) -> str:
            seen[secrets[match.group(0)]] += 1
            return f"[withheld: {secrets[match.group(0)]}]"

        return pattern.sub(one, text)

    for label in list(rows):
        rows[label] = [_walk(row, change) for row in rows[label]]
    users[:] = [_walk(user, change) for user in users]
    return seen


# Digests bound to a row's arguments: a staff approval and a customer's confirmation cover these exact
# arguments (agents.calls.arguments_digest), on the call and on the approval request.
BOUND_DIGESTS: dict[str, tuple[str, ...]] = {
    "agents.ToolCall": ("approval_digest", "confirmation_digest"),
    "approvals.ApprovalRequest": ("arguments_digest",),
}
# The question the customer's chat shows carries its call's digest, which the Confirm button sends
# back (agents.confirmation): bound to the arguments of the call the event names.
QUESTION_EVENT = "confirmation_requested"
BoundDigests = dict[tuple[str, Any], tuple[str, ...]]


def bound_digests(rows: dict[str, list[Row]]) -> BoundDigests:
    """Which digest columns of which rows are bound to the row's arguments, as read; and which
    questions to the customer are bound to their call's (by the event's key, the digest's key)."""
    bound: BoundDigests = {}
    for label, fields in BOUND_DIGESTS.items():
        for row in rows.get(label, []):
            digest = arguments_digest(row["arguments"])
            bound[(label, row["id"])] = tuple(f for f in fields if row.get(f) == digest)
    calls = {call["id"]: call for call in rows.get("agents.ToolCall", [])}
    for event, call in _questions(rows, calls):
        if event["payload"].get("digest") == arguments_digest(call["arguments"]):
            bound[("tickets.TicketEvent", event["id"])] = ("digest",)
    return bound


def rebind_digests(rows: dict[str, list[Row]], bound: BoundDigests) -> None:
    """After the customers' words and the secrets were taken out of the arguments: each digest that
    was bound to them is bound to what they are now, so an approval or a confirmation restored from
    the bundle still covers its call (and verify finds every paid refund approved as it was), and
    the question the chat shows is still the call's (its Confirm is accepted)."""
    for label in BOUND_DIGESTS:
        for row in rows.get(label, []):
            fields = bound.get((label, row["id"]), ())
            if fields:
                digest = arguments_digest(row["arguments"])
                row.update(dict.fromkeys(fields, digest))
    calls = {call["id"]: call for call in rows.get("agents.ToolCall", [])}
    for event, call in _questions(rows, calls):
        if bound.get(("tickets.TicketEvent", event["id"])):
            event["payload"] = {**event["payload"], "digest": arguments_digest(call["arguments"])}


def _questions(rows: dict[str, list[Row]], calls: dict[Any, Row]) -> list[tuple[Row, Row]]:
    """Each question asked of a customer, with the call it asks about."""
    found = []
    for event in rows.get("tickets.TicketEvent", []):
        payload = event.get("payload")
        if event.get("kind") == QUESTION_EVENT and isinstance(payload, dict) and payload.get("call_id") in calls:
            found.append((event, calls[payload["call_id"]]))
    return found


def withhold_model_parameters(parameters: Any) -> Any:
    """A profile version's model parameters as a bundle carries them: the generation parameters by value,
    any other by name, its value ``WITHHELD_PARAMETER``."""
    if not isinstance(parameters, dict):
        return parameters
    return {k: v if k in CARRIED_MODEL_PARAMETERS else WITHHELD_PARAMETER for k, v in parameters.items()}


def withheld_model_parameters(parameters: Any) -> list[str]:
    """The names of the model parameters a bundle carried without their values."""
    if not isinstance(parameters, dict):
        return []
    return sorted(k for k, v in parameters.items() if v == WITHHELD_PARAMETER)


def withhold_profile_secrets(rows: dict[str, list[Row]]) -> None:
    """Each profile version's model parameters in ``rows`` as a bundle carries them, in place."""
    for row in rows.get(PROFILE_LABEL, []):
        row["model_parameters"] = withhold_model_parameters(row.get("model_parameters"))
