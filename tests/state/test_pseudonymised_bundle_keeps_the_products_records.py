"""A pseudonymised bundle withholds the customer's words without rewriting the product's own records,
which the money rules look up again.

What broke: every customer message of 8+ characters was cut out of every text column, word or not. A
customer who wrote "a person" or "the ticket" rewrote a run's outcome and a call's error, "a person took
the ticket over", by which a person's stop of a refund is found (``agents.refunds._stopped_before``);
"not run" (``agents.confirmation``, ``approvals.services``) and "crashed after it was tried"
(``agents.calls``) were open to the same damage.
"""

from __future__ import annotations

from django.apps import apps

from agents.calls import CRASHED_PREFIX
from agents.models import NOT_RUN, PERSON_TOOK_OVER
from state.parts import PARTS
from state.pseudonyms import (
    CODE_COLUMNS,
    RECORD_COLUMNS,
    WITHHELD_WORDS,
    WORDS_COLUMNS,
    free_text,
    pseudonym_name,
    pseudonymise,
)
from state.rows import columns


def test_every_text_column_is_declared_as_words_records_or_codes():
    for part in (p for p in PARTS if p.personal):
        texts = {f.name for f in columns(apps.get_model(part.label)) if free_text(f)}
        declared = [d.get(part.label, frozenset()) for d in (WORDS_COLUMNS, RECORD_COLUMNS, CODE_COLUMNS)]
        assert sum(map(len, declared)) == len(set().union(*declared)), f"{part.label}: a column declared twice"
        assert texts == set().union(*declared), f"{part.label}: {sorted(texts.symmetric_difference(*declared))}"


def test_the_products_markers_are_kept_whatever_the_customer_wrote():
    wrote = ["a person", "the ticket", "not run: no", "crashed after it was tried", "a person please"]
    rows = {
        "tickets.Customer": [{"id": 7, "name": "Robin Hale", "email": "robin@example.com", "user": "robin"}],
        "tickets.Message": [{"id": i, "author_kind": "customer", "body": body} for i, body in enumerate(wrote)],
        "agents.AgentRun": [{"id": 1, "outcome": PERSON_TOOK_OVER, "last_error": "", "epochs": [1]}],
        "agents.ToolCall": [
            {"id": 1, "error": f"{NOT_RUN}: {PERSON_TOOK_OVER}", "approval_reason": "they asked for a person please"},
            {"id": 2, "error": f"{NOT_RUN}: the ticket is closed"},
            {"id": 3, "error": CRASHED_PREFIX + "timeout"},
            {"id": 4, "error": "No order Robin Hale was found for this customer."},
        ],
    }
    pseudonymise(rows, [], personal_labels=[p.label for p in PARTS if p.personal])

    assert rows["agents.AgentRun"][0]["outcome"] == PERSON_TOOK_OVER
    assert [c["error"] for c in rows["agents.ToolCall"]] == [
        f"{NOT_RUN}: {PERSON_TOOK_OVER}",
        f"{NOT_RUN}: {WITHHELD_WORDS} is closed",  # around the marker, the customer's words are still withheld
        CRASHED_PREFIX + "timeout",
        f"No order {pseudonym_name(7)} was found for this customer.",
    ]
    assert rows["agents.ToolCall"][0]["approval_reason"] == f"they asked for {WITHHELD_WORDS}"
    assert {m["body"] for m in rows["tickets.Message"]} == {WITHHELD_WORDS}
