"""Replacing many terms in many texts, in time that grows with the texts and the terms, not their product.

The rule is one regular expression: every term an alternative, the longer first (then by code point),
anywhere or as a word of its own, in any case or as written. Applied to a text as it is, the engine
tries each alternative at each character: a bundle with twice the customers has twice the terms and
twice the texts, and took four times as long.

A term can only match a text holding its words. A run of word characters that the term bounds on both
sides (as a word of its own, the term's edges bound it too) is a whole run of the text; one it bounds
after only ("Refund" of "Refund for S-3000") ends a run of the text, one it bounds before only begins one;
in the same case or, in any case, in one that folds to the same. So each text is tokenised once, the
terms whose needs it all holds are looked up by one of them, and the same rule is applied with those
terms alone. Dropping an alternative that matches nowhere in a text changes nothing of what the engine
does there, so the result is exactly the rule's, in the same order of preference.
"""

from __future__ import annotations

import functools
import re
import sys
from array import array
from collections import Counter
from collections.abc import Callable, Iterable

_BLOCK = 256


@functools.cache
def _case_fold() -> tuple[dict[int, str], frozenset[str]]:
    """What the pattern engine takes as the same letter in any case, as a translation table to one
    member of each class (its lowest), and the characters of the classes whose members differ in being
    word characters. Found by asking the engine itself, over every character with a case partner."""
    cased: set[str] = set()
    points = array("I", range(0xD800))
    points.extend(range(0xE000, sys.maxunicode + 1))  # every character, surrogates aside
    characters = points.tobytes().decode("utf-32-le" if sys.byteorder == "little" else "utf-32-be")
    for start in range(0, len(characters), _BLOCK):
        block = characters[start : start + _BLOCK]
        if block.lower() == block and block.upper() == block:
            continue  # most of the code points: scripts without case, and unassigned ones
        for char in block:
            lower, upper = char.lower(), char.upper()
            if lower != char or upper != char:
                cased.add(char)
                cased.update(c for c in (lower, upper) if len(c) == 1)
    every = "".join(sorted(cased))
    table: dict[int, str] = {}
    uneven: set[str] = set()
    for char in every:
        if ord(char) in table:
            continue  # a partner of one already asked about
        partners = re.findall(re.escape(char), every, re.IGNORECASE)
        table.update(dict.fromkeys(map(ord, partners), min(partners)))
        if len({_is_word(p) for p in partners}) > 1:
            uneven.update(partners)
    return table, frozenset(uneven)


def _is_word(char: str) -> bool:
    return re.match(r"\w", char) is not None


def replacer(terms: dict[str, str], *, words: bool, ignore_case: bool, joiners: str = "") -> Callable[[str], str]:
    """Replace each of ``terms`` by its value: anywhere, or (``words``) as a word of its own, which the
    characters in ``joiners`` join to others as letters do ("2001" is not a word of its own in "S-2001")."""
    if not terms:
        return lambda text: text
    return _Replacer(terms, words=words, ignore_case=ignore_case, joiners=joiners)


# What a text must hold for a term to match in it: a run of the term's that it bounds on both sides is a
# whole run of the text (WHOLE); one that only its end bounds ends a run of the text (ENDS: "Refund" of
# "Refund for S-3000" may be the end of "nonrefund"); one that only its start bounds begins one (BEGINS).
Need = tuple[str, str]
WHOLE, ENDS, BEGINS = "=", ">", "<"


class _Replacer:
    def __init__(self, terms: dict[str, str], *, words: bool, ignore_case: bool, joiners: str) -> None:
        self.flags = re.IGNORECASE if ignore_case else 0
        self.words = words
        self.ordered = sorted(terms, key=lambda t: (-len(t), t))
        self.values = [terms[t] for t in self.ordered]
        self.edge = rf"[\w{re.escape(joiners)}]"
        # As a word of its own a term's runs are the text's runs of word and joining characters, bounded at
        # the term's edges too; anywhere, its runs of word characters (a joiner is no word character there).
        self.runs = re.compile(f"{self.edge}+" if words else r"\w+")
        if ignore_case:
            self.table, uneven = _case_fold()
        else:
            self.table, uneven = {}, frozenset()
        self.always: list[int] = []  # terms with nothing to look them up by: tried on every text
        self.by_need: dict[Need, list[int]] = {}
        self.needs = [frozenset(self._needs(term)) for term in self.ordered]
        self.lengths = {
            kind: sorted({len(run) for needed in self.needs for k, run in needed if k == kind})
            for kind in (ENDS, BEGINS)
        }
        # Each term is looked up by its rarest need among the terms ("3000" in "order S-3000, it arrived"),
        # so a text holding a common word does not go through every term that has it.
        among = Counter(need for needed in self.needs for need in needed)
        for n, needed in enumerate(self.needs):
            if not needed or any(c in uneven for c in self.ordered[n]):
                self.always.append(n)
            else:
                self.by_need.setdefault(min(needed, key=lambda d: (among[d], -len(d[1]), d)), []).append(n)
        self.patterns: dict[tuple[int, ...], re.Pattern[str]] = {}

    def _needs(self, term: str) -> Iterable[Need]:
        for run in self.runs.finditer(term):
            bounded_before = self.words or run.start() > 0
            bounded_after = self.words or run.end() < len(term)
            folded = run.group().translate(self.table)
            if bounded_before and bounded_after:
                yield WHOLE, folded
            elif bounded_after:
                yield ENDS, folded
            elif bounded_before:
                yield BEGINS, folded

    def _held(self, text: str) -> set[Need]:
        """What ``text`` holds of what the terms need."""
        runs = {run.translate(self.table) for run in self.runs.findall(text)}
        held = {(WHOLE, run) for run in runs}
        for length in self.lengths[ENDS]:
            held.update((ENDS, run[-length:]) for run in runs if len(run) >= length)
        for length in self.lengths[BEGINS]:
            held.update((BEGINS, run[:length]) for run in runs if len(run) >= length)
        return held

    def _pattern(self, chosen: tuple[int, ...]) -> re.Pattern[str]:
        pattern = self.patterns.get(chosen)
        if pattern is None:
            # Each term its own group: what matched is known by the group, not by folding the match's case
            # again (the engine matches "YILMAZ" to "Yılmaz", but they casefold to "yilmaz" and "yılmaz").
            alternatives = "|".join(f"(?P<t{n}>{re.escape(self.ordered[n])})" for n in chosen)
            edge = self.edge
            source = rf"(?<!{edge})(?:{alternatives})(?!{edge})" if self.words else f"(?:{alternatives})"
            pattern = self.patterns[chosen] = re.compile(source, self.flags)
        return pattern

    def __call__(self, text: str) -> str:
        held = self._held(text)
        chosen = set(self.always)
        for need in held:
            for n in self.by_need.get(need, ()):
                if self.needs[n] <= held:
                    chosen.add(n)
        if not chosen:
            return text
        values = self.values
        return self._pattern(tuple(sorted(chosen))).sub(lambda m: values[int(str(m.lastgroup)[1:])], text)
