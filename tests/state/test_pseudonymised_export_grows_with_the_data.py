"""A pseudonymised export's work grows with the data, not with its square.

Every name, address, message and detail of every customer in the bundle was one alternative of a few
regular expressions, and each of those was tried at every character of every text of the bundle: twice
the tickets, four times the work (100 tickets exported in about 2.6 s, 200 in about 26 s, against 0.2 s
with the personal data). The work is counted here as the pattern engine sees it: for each text a
pattern is applied to, its length times the number of alternatives the pattern tries at each place.
"""

from __future__ import annotations

import re
import re._parser as sre_parse
from typing import Any

import pytest

from state import pseudonyms, terms
from tests.state.conftest import bundle_bytes, export, paused_ticket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]


def _alternatives(pattern: str, flags: int) -> int:
    """How many alternatives the engine may try at one place of a text: the branches of the pattern."""

    def count(items: Any) -> int:
        total = 0
        for op, value in items:
            if op is sre_parse.BRANCH:
                total += sum(max(1, count(branch)) for branch in value[1])
            elif op is sre_parse.SUBPATTERN:
                total += count(value[-1])
            elif op in (sre_parse.ASSERT, sre_parse.ASSERT_NOT):
                total += count(value[1])
            elif op in (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT, sre_parse.POSSESSIVE_REPEAT):
                total += count(value[2])
        return total

    return max(1, count(sre_parse.parse(pattern, flags)))


class _CountingPattern:
    def __init__(self, compiled: re.Pattern[str], work: list[int]) -> None:
        self._compiled = compiled
        self._work = work
        self._each = _alternatives(compiled.pattern, compiled.flags)

    def _count(self, text: Any) -> None:
        if isinstance(text, str):
            self._work[0] += len(text) * self._each

    def sub(self, repl: Any, string: str, count: int = 0) -> str:
        self._count(string)
        return self._compiled.sub(repl, string, count)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._compiled, name)
        if name in ("search", "match", "fullmatch", "finditer", "findall", "split", "subn"):

            def counted(*args: Any, **kwargs: Any) -> Any:
                string = args[1] if name in ("subn",) else (args[0] if args else kwargs.get("string"))
                self._count(string)
                return method(*args, **kwargs)

            return counted
        return method


class _CountingRe:
    def __init__(self, work: list[int]) -> None:
        self._work = work

    def compile(self, pattern: str, flags: int = 0) -> _CountingPattern:
        return _CountingPattern(re.compile(pattern, flags), self._work)

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)


def _work_to_export(tmp_path, monkeypatch, tickets, name: str) -> int:  # noqa: ANN001
    work = [0]
    with monkeypatch.context() as patched:
        for module in (pseudonyms, terms):
            patched.setattr(module, "re", _CountingRe(work))
        path = export(tmp_path, *tickets, name=name)
    data = bundle_bytes(path).decode()
    for ticket in tickets:  # the work was done: nobody's name is left in the bundle
        assert ticket.customer.name not in data
        assert ticket.customer.email not in data
    return work[0]


def test_pseudonymising_twice_the_tickets_takes_about_twice_the_work(tmp_path, monkeypatch, sandbox):
    tickets = [paused_ticket(f"Rosalind{n:02d} Vance{n:02d}", number=f"S-{3000 + n}")[0] for n in range(16)]

    small = _work_to_export(tmp_path, monkeypatch, tickets[:8], "eight")
    large = _work_to_export(tmp_path, monkeypatch, tickets, "sixteen")

    print(f"pattern work: 8 tickets {small}, 16 tickets {large}, ratio {large / small:.2f}")
    assert large <= 2.5 * small, f"16 tickets took {large / small:.2f} times the work of 8 ({large} vs {small})"
