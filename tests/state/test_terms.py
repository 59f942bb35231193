"""Replacing terms by looking up only those a text can hold gives what one pattern of all of them gives:
the same matches (whole words, case, joiners), preferred in the same order."""

from __future__ import annotations

import re
import sys
from collections import Counter

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from state.terms import _case_fold, replacer


def one_pattern(terms: dict[str, str], *, words: bool, ignore_case: bool, joiners: str = ""):  # noqa: ANN201
    """The rule as one regular expression of every term."""
    if not terms:
        return lambda text: text
    ordered = sorted(terms, key=lambda t: (-len(t), t))
    alternatives = "|".join(f"(?P<t{n}>{re.escape(t)})" for n, t in enumerate(ordered))
    edge = rf"[\w{re.escape(joiners)}]"
    source = rf"(?<!{edge})(?:{alternatives})(?!{edge})" if words else f"(?:{alternatives})"
    pattern = re.compile(source, re.IGNORECASE if ignore_case else 0)
    values = [terms[t] for t in ordered]
    return lambda text: pattern.sub(lambda m: values[int(str(m.lastgroup)[1:])], text)


# Letters with partners in other cases that fold unlike str.casefold (ı, İ, ſ, K, ß), a combining mark
# that the engine takes for an iota in any case, joiners, spaces and punctuation.
ALPHABET = "aAbBsSiIıİſkKKßΙιͅ01 -/.,'"
pieces = st.text(alphabet=ALPHABET, min_size=1, max_size=6)
term_sets = st.dictionaries(pieces, st.sampled_from(["<A>", "<B>", "<C>"]), max_size=6)
texts = st.lists(st.one_of(pieces, st.text(alphabet=ALPHABET, max_size=4)), max_size=8).map("".join)


@hsettings(max_examples=400, deadline=None)
@given(terms=term_sets, text=texts, words=st.booleans(), ignore_case=st.booleans(), joiners=st.sampled_from(["", "-/"]))
def test_replacing_by_looked_up_terms_is_replacing_by_one_pattern_of_all(terms, text, words, ignore_case, joiners):
    # The text holds the terms too, in pieces and whole, so that they match.
    text = text + " " + " ".join(terms) + "/" + "".join(terms).upper()
    expected = one_pattern(terms, words=words, ignore_case=ignore_case, joiners=joiners)(text)
    assert replacer(terms, words=words, ignore_case=ignore_case, joiners=joiners)(text) == expected


def test_a_customers_name_in_another_case_and_a_detail_joined_to_others():
    named = replacer({"Yılmaz": "Customer 7", "Ana": "Customer 8"}, words=True, ignore_case=True)
    assert named("YILMAZ and ana, not Anabel or yilmazlar") == "Customer 7 and Customer 8, not Anabel or yilmazlar"
    detailed = replacer({"2001": "[withheld]"}, words=True, ignore_case=True, joiners="-/")
    assert detailed("code 2001, order S-2001 or 2001/3") == "code [withheld], order S-2001 or 2001/3"
    quoted = replacer({"Refund for S-3000": "[withheld]"}, words=False, ignore_case=False)
    assert quoted("Re: nonRefund for S-30001") == "Re: non[withheld]1"


def test_every_character_folds_to_one_member_of_the_class_the_engine_matches_it_with():
    table, uneven = _case_fold()
    every = "".join(sorted(map(chr, table)))
    classes = Counter(every.translate(table))
    for char in every:
        partners = re.findall(re.escape(char), every, re.IGNORECASE)
        assert {p.translate(table) for p in partners} == {char.translate(table)}, char
        assert len(partners) == classes[char.translate(table)], char
    assert "ͅ" in uneven  # a combining mark the engine takes for an iota in any case
    # No character left out of the table matches one in it, in any case.
    characters = "".join(chr(p) for p in range(sys.maxunicode + 1) if not 0xD800 <= p < 0xE000)
    assert set(re.compile(f"[{re.escape(every)}]", re.IGNORECASE).findall(characters)) == set(every)
