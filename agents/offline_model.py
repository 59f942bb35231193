"""The offline deterministic model: the default, so the product runs with no API key.

It is NOT a language model. It reads the conversation with fixed rules, asks
for real tool calls through the same interface as an OpenAI-compatible model,
and streams its answer token by token. It handles the demo conversations:
order status, refund requests, policy questions and asking for a person.
The same input always gives the same output, which tests and benchmarks rely on.

``bench:N`` as the customer's message makes it call N tools, one per step,
with no delay: the zero-latency model of the benchmarks.
"""

from __future__ import annotations

import functools
import json
import re
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from babel.numbers import list_currencies
from django.conf import settings

from agents.llm import Message, ModelResponse, TokenCallback, ToolCallRequest, ToolSpec, Usage
from tickets.money import format_money, minor_digits

# An order number: one letter and digits ("A-1001", "a-1001", "R-4102-2"), or, written in capitals, a
# longer prefix ("ORD-24010", "EU-2024-00017"). Lower-case words before digits ("mid-2024") are not one,
# and none is read out of a longer one ("R-4102" is not in "R-4102-2" nor in "X-R-4102").
ORDER_NUMBER = re.compile(
    r"(?<![-\w])((?i:[A-Z])-\d{3,10}(?:-\d{1,8})*|[A-Z]{2,6}(?:-[A-Z0-9]{1,8})?-\d{3,10}(?:-[A-Z0-9]{1,8})*)(?![-\w])"
)
THANKS = re.compile(r"^\W*(thanks?|thank you|thx|ok(ay)?|great|perfect|cheers|got it)\b[\w\s,.!]*$", re.IGNORECASE)
AGAIN = re.compile(r"\b(another|again|more|second|also|additional)\b", re.IGNORECASE)
BENCH = re.compile(r"^bench:(\d{1,3})$")
# A request is read clause by clause: "A-1 arrived fine, but please refund B-2" asks about B-2 only.
CLAUSE = re.compile(r"[.;!?]+(?=\s|$)|\n+|\bbut\b", re.IGNORECASE)  # not the point in "$87.25"
REFUND_WORD = re.compile(r"\brefund", re.IGNORECASE)
# A refund clause that does not ask for one: "no refund", "don't issue a refund", "rather a replacement
# than a refund", "hold off on the refund". Read in the part of the clause (between commas) that names
# the refund, so "it never came, please refund it" still asks; any of them there and nothing is refunded
# (the customer is asked instead).
NOT_ASKED = re.compile(
    r"(?:\b(?:no|not|never|without|dont|doesnt|cannot)|n['’]t)\W+(?:\w+\W+){0,3}?refund"
    r"|\b(?:instead|rather|hold(?:ing)?\s+off|hold\s+(?:the|my|that|this|a)?\s*refund|wait\s+(?:on|with)"
    r"|(?:cancel|stop|withdraw|drop)\w*\s+(?:the|my|that|this|a)?\s*refund)\b",
    re.IGNORECASE,
)
# About refunds, not asking for one: "Is it eligible for a refund?", "What is your refund policy?",
# "How long does a refund take?", "Where is my refund?".
ABOUT_REFUNDS = re.compile(
    r"\b(?:eligib\w*|qualif\w*|policy|policies|how\s+long|how\s+many|how\s+do(?:es)?|how\s+can|how\s+would"
    r"|when\s+will|whether|wondering|status|where\s+is|any\s+news|possible\s+to|allowed|rules?|usually|normally"
    r"|(?:received|got|gotten|had)\s+(?:the|my|a|your|their|his|her)\s+refund|refund\s+(?:has\s+|was\s+)?(?:arrived|came))\b",
    re.IGNORECASE,
)
# How a request is put: "please", "I want / would like / need a refund", "Could you refund ...", "Can I
# get ...", or "refund" said to us ("Refund order A-1 please", "refund me $20"). A clause that names a
# refund without asking ("I'm thinking about a refund", "my sister got a refund") is asked about first.
REQUEST = re.compile(
    r"\b(?:please|pls|plz|kindly)\b|\b(?:i|we)\b[^.?!]{0,20}?\b(?:want|wanted|need|needed|like|request|requesting"
    r"|demand|expect|asking|ask)\b|\b(?:can|could|would|will)\s+(?:you|u)\b|\b(?:can|could|may)\s+i\b"
    r"|^\W*(?:requesting\s+(?:a\s+)?(?:full\s+)?)?refund\b"
    r"|\brefund\s+(?:me|it|this|that|order|my|the|[$€£¥\d])",
    re.IGNORECASE,
)
# "Refund order A-1001", "refund me $20": the verb said to us, at the start of the clause.
IMPERATIVE_REFUND = re.compile(r"\W*refund\s+(?:me|it|this|that|order|my|the|[$€£¥\d])", re.IGNORECASE)
HEDGE = re.compile(
    r"\b(?:might|maybe|perhaps|thinking|considering|possibly|not\s+sure|let\s+you\s+know|later|decide|deciding)\b",
    re.IGNORECASE,
)
# Courtesy that is not a condition: "when you get a chance", "if possible", "as soon as you can".
COURTESY = re.compile(
    r"\b(?:when(?:ever)?\s+you\s+(?:get|have|find)\s+(?:a|the)\s+(?:chance|moment|minute|time)"
    r"|when(?:ever)?\s+(?:you\s+can|possible|convenient)|if\s+(?:you\s+can|possible|that'?s\s+ok(?:ay)?"
    r"|that\s+is\s+ok(?:ay)?|you\s+could|you\s+don'?t\s+mind)|as\s+soon\s+as\s+(?:you\s+can|possible)"
    r"|once\s+you\s+can)\b",
    re.IGNORECASE,
)
# A question that asks us to do it: "Could you refund ...?", "Can I get a refund for ...?".
ASKS_US = re.compile(
    r"\b(?:can|could|would|will)\s+(?:you|u)\b|\b(?:can|could|may)\s+i\s+(?:please\s+)?(?:get|have|ask|request)\b"
    r"|\b(?:please|pls|plz|kindly)\b",
    re.IGNORECASE,
)
# A later message that takes the request back or changes it: the agent asks before refunding anything.
TAKEN_BACK = re.compile(
    r"\b(?:never\s*mind|nevermind|ignore|disregard|forget\s+(?:it|that|about)|scratch\s+that|cancel\s+that"
    r"|wrong\s+(?:order|number|one|amount)|i\s+meant?|typo|correction|corrected|should\s+(?:be|read|say|have\s+been)"
    r"|my\s+mistake|my\s+bad|not\s+that\s+one|no\s+longer|changed\s+my\s+mind"
    r"|on\s+second\s+thoughts?|(?:just|finally)\s+(?:showed|turned)\s+up|(?:came|arrived|showed\s+up)\s+after\s+all"
    r"|actually,?\s+(?:don'?t|do\s+not|no\b|never\s*mind|it\s+(?:just\s+)?(?:came|arrived|showed\s+up))|found\s+it)\b",
    re.IGNORECASE,
)
# A refund asked on a condition, or a question about one put as a request ("Can you tell me if ...",
# "refund it if it has not arrived by Friday", "unless you can send a replacement"): asked first.
CONDITION = re.compile(
    r"\b(?:if|unless|whether|when|whenever|once\s+(?:you|it|we|the|my|i)\b|in\s+case|in\s+the\s+event|provided|assuming|should\s+(?:it|they|the)"
    r"|after\s+(?:you|we|it'?s|it\s+is|it\s+has\s+been)\s+(?:receive|get|gets|got|returned|been\s+returned|sent\s+back)"
    r"|as\s+soon\s+as|tell\s+me|let\s+me\s+know)\b",
    re.IGNORECASE,
)
SUBCLAUSE = re.compile(r",|\band\b|\bso\b|\bbecause\b|\bas\b|\bsince\b", re.IGNORECASE)
# An amount as customers write it: "$1,200.00", "€20", "20 €", "20 EUR", "EUR 20", "20 euros", "¥500",
# "1,50 EUR" (a decimal comma).
_NUMBER = r"\d(?:[\d.,]*\d)?"
_CODES = r"usd|eur|gbp|jpy|chf|cad|aud|dollars?|euros?|pounds?|yen"
# Any currency named by its ISO code in capitals ("KWD 6.170", "20.00 SEK"): the form the agent's
# question shows for an order in a currency it has no symbol for here (``_example_amount``). In
# capitals only: "all", "top" or "try" in lower case are words.
_ISO_CODE = rf"(?-i:{'|'.join(sorted(list_currencies()))})"
MONEY = re.compile(
    rf"(?P<symbol>[$€£¥])\s?(?P<n1>{_NUMBER})"
    rf"|(?P<n2>{_NUMBER})\s?(?:(?P<after>{_CODES}|{_ISO_CODE})\b|(?P<sign>[$€£¥]))"
    rf"|\b(?P<before>{_CODES}|{_ISO_CODE})\s?(?P<n3>{_NUMBER})",
    re.IGNORECASE,
)
_CURRENCY_OF = {"€": "eur", "£": "gbp", "¥": "jpy", "euro": "eur", "euros": "eur", "pound": "gbp", "pounds": "gbp"}
_CURRENCY_OF.update({"yen": "jpy", "$": "$", "dollar": "$", "dollars": "$"})  # "$": any dollar
DOLLARS = frozenset({"usd", "cad", "aud", "nzd", "hkd", "sgd"})
# The amount named with the verb: "refund $10.00", "refund me €10", "refund of 10 EUR".
AMOUNT_ASKED = re.compile(rf"\brefund\w*\s+(?:(?:me|of|for|just|only)\s+)*(?={MONEY.pattern})", re.IGNORECASE)
# Part of the order, without (or beside) an amount: how much is asked, never guessed.
PART = re.compile(
    r"\b(?:part|partial|partly|half|most|some|portion|difference|shipping|postage|fees?|one\s+of|missing\s+\w+"
    r"|(?:only|just)\s+(?:the|a|an|one|for|[$€£¥\d]))",
    re.IGNORECASE,
)
# Everything but an amount: the amount named is what the customer keeps, not what is refunded.
EXCEPT = re.compile(
    r"\b(?:except|excluding|minus|less|apart\s+from|all\s+but|other\s+than|but\s+not|keep)\b", re.IGNORECASE
)


@dataclass
class Done:
    name: str
    args: dict[str, Any]
    result: dict[str, Any]


@dataclass(frozen=True)
class Written:
    """An amount as the customer wrote it: the number, and the currency it names ("$": any dollar)."""

    number: Decimal
    currency: str

    def cents_in(self, currency: str) -> int | None:
        """In ``currency``'s minor unit, or None when it names another currency or has more digits than it."""
        currency = currency.lower()
        if self.currency != currency and not (self.currency == "$" and currency in DOLLARS):
            return None
        cents = self.number.scaleb(minor_digits(currency))
        return int(cents) if cents == cents.to_integral_value() else None


def _number(written: str) -> Decimal | None:
    """A number as written: "1,200.00" and "1.200,00" (thousands and a decimal point or comma),
    "1,50" (a decimal comma). None when it can be read two ways ("1,5000") or not at all."""
    marks = [c for c in written if c in ".,"]
    if not marks:
        return Decimal(written)
    decimal = marks[-1] if marks.count(marks[-1]) == 1 else None
    whole, _, fraction = written.rpartition(decimal) if decimal else (written, "", "")
    if decimal == "," and len(fraction) == 3 and "." not in written:
        whole, fraction = written, ""  # "1,200": thousands, as English writes them
    groups = re.split(r"[.,]", whole)
    if len(groups) > 1 and (not 1 <= len(groups[0]) <= 3 or any(len(g) != 3 for g in groups[1:])):
        return None
    if decimal == "," and fraction and len(fraction) > 2:
        return None
    return Decimal("".join(groups) + (f".{fraction}" if fraction else ""))


def _written(match: re.Match[str]) -> Written | None:
    number = _number(match["n1"] or match["n2"] or match["n3"])
    named = (match["symbol"] or match["after"] or match["sign"] or match["before"]).lower()
    return Written(number, _CURRENCY_OF.get(named, named)) if number is not None else None


@dataclass
class RefundAsk:
    """What a customer's words ask to refund: the order (None when no order, or several, are named for
    it: ``orders`` then lists them) and the amount as written (None: the whole order, unless
    ``how_much`` says the customer wants part of it without saying how much, or named several)."""

    order_number: str | None
    orders: list[str] = field(default_factory=list)
    amount: Written | None = None
    how_much: bool = False
    unsure: bool = False  # taken back or changed in a later message: asked again, nothing refunded
    asked: str = ""  # the clauses that ask for it, when the whole order is asked for
    request: str = ""  # the customer's words, whole

    def plain(self, order: dict[str, Any]) -> bool:
        """Is the request worded plainly (``plainly_asked``)? The order's items may be named in it."""
        lines = [line for line in order.get("lines") or [] if isinstance(line, dict)]
        items = {word for line in lines for word in _stems(str(line.get("description", "")))}
        return plainly_asked(self.request, items=items)

    def names_an_item(self, order: dict[str, Any]) -> bool:
        """Does the request name one of the order's items, when the order holds more than that item
        ("refund order A-1 for the broken mug" on a mug and a kettle)? Then it asks for part of it."""
        lines = [line for line in order.get("lines") or [] if isinstance(line, dict)]
        if len(lines) < 2 and not any(int(line.get("quantity") or 1) > 1 for line in lines):
            return False
        said = _stems(self.request or self.asked)  # "Please refund order A-1. The mug." names the mug
        return any(_stems(str(line.get("description", ""))) & said for line in lines)

    def cents(self, order: dict[str, Any]) -> int | None:
        """What to refund of the looked-up order, in its minor unit: the amount asked, or all that is left
        when none was named; None when the customer must be asked how much (part of it without an
        amount, or an amount in another currency than the order's), or asked to put it plainly."""
        if self.how_much or not self.plain(order):
            return None
        if self.amount is None:
            if self.names_an_item(order):
                return None
            return int(order.get("refundable_cents", 0)) or None
        return self.amount.cents_in(str(order.get("currency", "")))


# Words of an item's description that do not name it ("Green tea, 500 g": "green" and "tea" do).
_NOT_AN_ITEM = frozenset("the and with for set pack pair box order item items size one two new".split())


def _stems(text: str) -> set[str]:
    """The words of a text, plurals as singulars ("mugs" -> "mug"), short and common words left out."""
    words = re.findall(r"[^\W\d_]{3,}", text.lower())
    return {_singular(word) for word in words if word not in _NOT_AN_ITEM}


def _singular(word: str) -> str:
    if re.search(r"(?:ss|x|ch|sh)es$", word):
        return word[:-2]  # "glasses", "boxes", "dishes"
    return word[:-1] if word.endswith("s") and not word.endswith("ss") else word


def _distinct(found: list[str]) -> list[str]:
    return list(dict.fromkeys(number.upper() for number in found))


def _clauses(text: str) -> list[tuple[str, bool]]:
    """The clauses of a message, each with whether it ends with a question mark."""
    found, start = [], 0
    for end in CLAUSE.finditer(text):
        found.append((text[start : end.start()], "?" in end.group()))
        start = end.end()
    found.append((text[start:], False))
    return [(clause.strip(), question) for clause, question in found if clause.strip()]


def _asks_for_it(clause: str, question: bool) -> str:
    """Does this clause, which names a refund, ask for one? "no" when the part that names it says no
    (or would rather something else), or it asks about refunds (eligibility, the policy, how long,
    one received), or it is a question that does not ask us to act; "unsure" when it asks on a
    condition ("if", "unless", "tell me if") or only names a refund without asking ("I might want a
    refund"): the customer is asked first; else "yes"."""
    if any(NOT_ASKED.search(part) for part in SUBCLAUSE.split(clause) if REFUND_WORD.search(part)):
        return "no"
    if ABOUT_REFUNDS.search(clause):
        return "no"
    if question and not ASKS_US.search(clause):
        # "Refund order A-1001?": said to us, but as a question; asked first, not paid and not waved off.
        return "unsure" if IMPERATIVE_REFUND.match(clause) else "no"
    if CONDITION.search(COURTESY.sub(" ", clause)) or HEDGE.search(clause) or not REQUEST.search(clause):
        return "unsure"
    return "yes"


def _unread_numbers(asked: str) -> bool:
    """An amount in the request that could not be read ("10%", "20 bucks", "refund 20 of it"): what
    it says about how much is not known, so the customer is asked. Other numbers (a date, a count of
    days) say nothing about how much."""
    rest = MONEY.sub(" ", _without_order_numbers(asked))
    return bool(
        re.search(rf"%|[$€£¥₹¢]|\b(?:bucks?|quid|cents?|percent|pct|{_CODES})\b", rest, re.IGNORECASE)
        or re.search(r"\brefund\w*\s+(?:me\s+|of\s+|just\s+|only\s+)*\d", rest, re.IGNORECASE)
        or re.search(r"\d[\d.,]*\s+(?:of|off|from|back)\b", rest, re.IGNORECASE)
    )


def refund_asked(request: str) -> RefundAsk | None:
    """The refund the customer's words ask for (see ``_read_refund_ask``). It is paid only when the
    request is worded plainly as well (``RefundAsk.plain``)."""
    ask = _read_refund_ask(request)
    if ask is not None:
        ask.request = request
    return ask


# --- plain wording ----------------------------------------------------------------------
# Money moves only on a request put in a few plain forms (``plainly_asked``): an unknown word or form
# ("nvm", "make that $30", "after the coupon", "I have it now", "we will refund"), an unknown currency
# ("MX$20", "HKD") or number ("20-25", "$1.500") stops it, whatever the rules above made of the
# request. The customer is asked instead, and a plain "please refund order A-1001" then pays. Asking
# costs a message; a wrong refund costs money.
_PLAIN_NUMBER = r"\d+(?:[.,]\d{3})*(?:[.,]\d{2})?(?![\d.,]*\d)"
_PLAIN_AMOUNT = re.compile(
    rf"(?<![\w$€£¥])[$€£¥]\s?{_PLAIN_NUMBER}|(?<![\w.,$€£¥]){_PLAIN_NUMBER}\s?(?:[$€£¥]|(?:usd|eur|gbp|jpy"
    rf"|dollars?|euros?|pounds?|yen)\b)|\b(?:usd|eur|gbp|jpy)\s?{_PLAIN_NUMBER}"
)
# An amount named by its currency's code in capitals, any currency ("KWD 6.170", "20.00 SEK"): read
# before the request is put in lower case.
_PLAIN_CODED_AMOUNT = re.compile(
    rf"\b(?P<before>{_ISO_CODE})\s?(?P<n1>{_PLAIN_NUMBER})|(?<![\w.,$€£¥])(?P<n2>{_PLAIN_NUMBER})\s?(?P<after>{_ISO_CODE})\b"
)


def _ambiguous_point(number: str, code: str = "") -> bool:
    """Is a point in the number a decimal point or thousands ("1.500")? Asked, unless the currency
    counts three digits ("KWD 6.170" is six dinars and 170 fils); in such a currency a comma before
    three digits is asked about instead ("KWD 6,170": six thousand dinars, or six and 170 fils?)."""
    if code and minor_digits(code) == 3:
        return bool(re.search(r",\d{3}(?!\d)", number)) and "." not in number
    return bool(re.search(r"\.\d{3}(?!\d)", number)) and "," not in number


def plainly_asked(request: str, *, items: set[str] = frozenset()) -> bool:  # type: ignore[assignment]
    """Is the request worded plainly? Read sentence by sentence (and clause by clause: commas, "as",
    "because", "and", "but"), each must be one of a few plain forms: a greeting or thanks, the request
    itself ("please refund order A-1001", "I would like a refund of $20 for order A-1001", "could you
    refund it"), or why ("it never arrived", "the handle snapped off on the first day", "my espresso
    machine A-1001 broke after a week", with ``items``, the words of the order's items). Anything else
    ("I have it now", "the delivery", "on the 30th", "we will refund order A-1001") is not plain: the
    customer is asked first. At most one amount; no mark it does not know; a file's line and a name
    in quotes ('the "deluxe" mug') are left out."""
    text = _EMPHASIS.sub(r"\2", _POLITE_EMOJI.sub(" ", request))
    text = COURTESY.sub(" ", _ATTACHED.sub(" ", text.replace("’", "'")))
    text = _QUOTED.sub(lambda m: " " if not re.search(r"refund|\d", m[1], re.I) else m[0], text)
    if len(_distinct(ORDER_NUMBER.findall(text))) > 1:
        return False
    text = ORDER_NUMBER.sub(" onum ", text)
    coded = list(_PLAIN_CODED_AMOUNT.finditer(text))
    if any(_ambiguous_point(m["n1"] or m["n2"], m["before"] or m["after"]) for m in coded):
        return False  # "SEK 1.500": a decimal point or thousands? Asked.
    text = _PLAIN_CODED_AMOUNT.sub(" amt ", text).lower()
    if any(_ambiguous_point(m[0]) for m in _PLAIN_AMOUNT.finditer(text)):
        return False  # "$1.500": a decimal point or thousands? Asked.
    text, amounts = _PLAIN_AMOUNT.subn(" amt ", text)
    amounts += len(coded)
    if amounts > 1 or any(not (c.isalpha() or c.isspace() or c in _PLAIN_MARKS) for c in text):
        return False
    for short, long in _SPELLED_OUT:
        text = re.sub(short, long, text)
    forms = _plain_forms(frozenset(items), bool(amounts))
    for sentence in _SENTENCE.split(text):
        sentence = " ".join(re.findall(r"[^\W_]+(?:'[^\W_]+)*|#", sentence)).replace("# ", "#")
        if sentence and not forms.fullmatch(sentence):
            return False
    return True


def _example_amount(cents: int, currency: str) -> str:
    """An amount as the agent shows it in a question, in a form it reads back: the amount as people
    read it ("$20.00", "€20.00", "CHF 20.00"), or, where that is a symbol not read here ("CA$20.00",
    "A$20.00"), by its code ("CAD 20.00")."""
    shown = format_money(cents, currency)
    found = MONEY.fullmatch(shown)
    written = _written(found) if found else None
    if written is not None and written.cents_in(currency) == cents and plainly_asked(f"Refund {shown} on A-1001."):
        return shown
    return f"{currency.upper()} {re.sub(r'^[^0-9]+', '', shown)}"


_SENTENCE = re.compile(r"[.;!?:,\n()–—]+|\s-+\s|\b(?:as|because|since|and|but)\b")
_SPELLED_OUT = [
    (r"\b(did|does|do|has|have|had|is|was|are|were|wo|ca|could|would|should)n't\b", r"\1 not"),
    (r"\b(did|does|do|has|have|had|is|was|are|were)nt\b", r"\1 not"),
    (r"\bwo not\b", "will not"), (r"\bca not\b", "can not"), (r"\bcannot\b", "can not"),
    (r"\bi'd\b", "i would"), (r"\bi'm\b", "i am"), (r"\bit's\b", "it is"), (r"\bi've\b", "i have"),
]  # fmt: skip
_WENT_WRONG_WORDS = (
    r"(?:broken|damaged|cracked|smashed|shattered|chipped|dented|bent|torn|ripped|scratched|defective|faulty|late"
    r"|leaking|stained|dirty|opened|wrong|in pieces|unusable|useless|dead|missing|not working|lost)"
)


@functools.lru_cache(maxsize=256)
def _plain_forms(items: frozenset[str], amount: bool) -> re.Pattern[str]:
    """The plain forms of a sentence (see ``plainly_asked``), for an order with these item words."""
    item = "|".join(sorted((re.escape(w) + "s?" for w in items), key=len, reverse=True)) or "(?!)"
    order = r"(?:(?:my|the|this|that) )?(?:(?:whole|entire|full) )?(?:order )?(?:number )?#?onum"
    it = rf"(?:it|them|this|that|this one|{order})"
    thing = (
        rf"(?:(?:my|the|this|that|your) (?:(?:{item}) )*(?:order|item|package|parcel|product|delivery|shipment"
        rf"|handle|lid|screen|strap|zip|zipper|button|wheel|glass|box|packaging|rest|{item})"
        rf"(?: (?:on|from|in|of) {order}| onum)?)"
    )
    subject = rf"(?:it|they|this|that|onum|{order}|{thing})"
    when = (
        r"(?: (?:on the \d{1,2}(?:st|nd|rd|th)|on arrival|on the first (?:day|use)|after (?:a|one|\d{1,3}) "
        r"(?:days?|weeks?|uses?)|after the first (?:wash|use|day|week)|after i used it(?: once)?|within (?:a|one"
        r"|\d{1,3}) (?:days?|weeks?)|\d{1,3} (?:days?|weeks?) ago|in (?:shipping|transit|the post|delivery)"
        r"|today|yesterday|last week|again|too|now))*"
    )
    bad = rf"(?:(?:completely|totally|very|really|all) )?{_WENT_WRONG_WORDS}"
    went_wrong = (
        rf"(?:(?:has |had )?never (?:arrived|came|come|been delivered|showed up|turned up)"
        rf"|(?:did|has|have|had) not (?:arrive|arrived|come|been delivered|show up|turn up)(?: yet)?"
        rf"|(?:actually )?(?:arrived|came|was delivered|were delivered|showed up|turned up) (?:{bad}|\d{{1,3}} "
        rf"(?:days?|weeks?) late)"
        rf"|(?:is|was|are|were) (?:{bad}|not what i ordered|not as described|the wrong (?:size|colou?r|item|one"
        rf"|product)|too (?:small|big|large|tight|loose))"
        rf"|(?:broke|stopped working|does not work|did not work|will not (?:turn on|work)|does not (?:turn on|fit)"
        rf"|did not fit|fell apart|snapped(?: off)?|cracked|leaks|leaked))"
    )
    why = [
        rf"{subject} {went_wrong}{when}",
        rf"i (?:never|did not|have not|still have not) (?:received|receive|got|get) {it}(?: yet)?",
        r"i (?:received|got) (?:the |a )?wrong (?:item|size|colou?r|product|order|one)",
        rf"i (?:received|got) {it} {bad}{when}",
        r"here is (?:a (?:photo|picture) of )?the damage(?: on (?:(?:my|the) )?(?:order )?onum)?",
    ]
    if amount:  # how much went wrong, beside the amount the customer named
        why += [
            rf"(?:one|an|a) (?:item|part|piece|{item}) (?:was|is) missing",
            r"(?:it|i) was overcharged|the (?:postage|shipping) was overcharged",
            r"amt",
        ]
    please = r"(?:(?:please|pls|plz|kindly) )?"
    full = r"(?:(?:a|my|the) )?(?:full )?refund"
    to_what = rf"(?:for|on|of) {it}"
    everything = rf"(?:the (?:full|whole|total) amount (?:for|on|of) {it})"
    of_amount = rf"(?:of )?(?:another )?amt(?: (?:on|of|for|from) {it})?"
    ask = [
        rf"{please}(?:(?:can|could|would|will) (?:you|u) (?:please )?)?refund (?:me )?(?:for )?(?:{it}|{of_amount}"
        rf"|{everything})",
        rf"(?:i|we) (?:would like|want|need) (?:my|our) money back(?: for {it})?",
        rf"(?:i|we) (?:would like|want|need|am asking for|am requesting|request|demand)(?: to (?:get|have|request))?"
        rf" (?:{full} {to_what}|(?:a )?refund {of_amount})",
        rf"(?:can|could|may) i (?:please )?(?:get|have) (?:{full} {to_what}|(?:a )?refund {of_amount})",
        rf"{please}(?:issue|process) {full} {to_what}",
        rf"(?:i am )?requesting {full} {to_what}",
        rf"{full} {to_what}",
    ]
    greeting = (
        r"(?:hi|hello|hey|dear)(?: (?:team|support|there|all))?|good (?:morning|afternoon|evening)"
        r"|(?:many )?thanks?(?: you)?(?: (?:so|very) much)?(?: in advance)?|thx|cheers|(?:kind )?regards"
    )
    # A deadline is no condition: paying now meets it ("by Friday"; "tomorrow" alone would be later).
    by = r"by (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|tomorrow|the end of (?:the|this) week)"
    then = rf"(?: (?:please|pls|plz|thanks|thank you|thx|again|asap|now|today|{by}))*"
    forms = [f"(?:{please}{form}{then})" for form in ask] + why + [greeting]
    return re.compile("|".join(forms))


# A friendly face, a thumbs up, folded hands or a heart says nothing about the request; any other mark
# ("🤔", "😬") is not plain, and the customer is asked.
_POLITE_EMOJI = re.compile(
    "[\U0001f64f\U0001f60a\U0001f642\U0001f600\U0001f603\U0001f604\U0001f44d\u263a\u2764\u2665]"
    "[\ufe0f\U0001f3fb-\U0001f3ff]*"
)
# Emphasis as chat boxes and mail write it ("**A-1001**", "_please_"): the words stay, the marks go.
_EMPHASIS = re.compile(r"(\*\*|__|\*|_)(?=[^\s*_])([^*_\n]{1,200}?)(?<=[^\s*_])\1")
# The line the model reads for each file the customer sent (agents.conversation.customer_text).
_ATTACHED = re.compile(r"^\[attached: [^\]\n]* \([^()\n]*, [^()\n]*\)\]$", re.M)
# A name in quotes ('the "deluxe" dish') is a description; a request in quotes is someone's words.
_QUOTED = re.compile(r'["“”]([^"“”\n]{0,60})["“”]')
_PLAIN_MARKS = frozenset("0123456789.,!?:;'#()-–—")


def _read_refund_ask(request: str) -> RefundAsk | None:
    """The refund the customer's words ask for, or None when they ask for none (no "refund", "I don't
    want a refund", a question about refunds). Read from the clauses that ask for it: an order or an
    amount named elsewhere in the message ("it cost $80.00; please refund $10.00") is not what is
    refunded. Whatever is not clear is asked, never guessed: whether (a condition, the request taken
    back or changed in a later message), which order (several named), or how much (part of it, an
    amount that cannot be read, several, one named elsewhere, or all but one)."""
    read = [(c, _asks_for_it(c, question)) for c, question in _clauses(request) if REFUND_WORD.search(c)]
    clauses = [c for c, answer in read if answer == "yes"]
    if not clauses:
        if not any(answer == "unsure" for _, answer in read):
            return None
        orders = _distinct(ORDER_NUMBER.findall(request))
        return RefundAsk(order_number=None, orders=orders, unsure=True)
    asked = " ".join(clauses)
    orders = _distinct(ORDER_NUMBER.findall(asked)) or _distinct(ORDER_NUMBER.findall(request))
    # Another order named after the request ("Refund A-1. B-2, not A-1, sorry"): which one is asked.
    after = " ".join(c for c, _ in _clauses(request)[_last_asking(request) + 1 :])
    if len(orders) != 1 or TAKEN_BACK.search(request) or set(_distinct(ORDER_NUMBER.findall(after))) - set(orders):
        return RefundAsk(order_number=None, orders=orders, unsure=len(orders) == 1 or not orders)
    # Amounts are read with order numbers blanked out ("R-150 $20" names $20, not $150).
    asked, whole = _without_order_numbers(asked), _without_order_numbers(request)
    amounts = list(dict.fromkeys(_written(m) for m in MONEY.finditer(asked)))
    # Compared as amounts, not as text: "$15" named elsewhere is another amount than "$150" asked.
    elsewhere = [w for w in (_written(m) for m in MONEY.finditer(whole)) if w not in amounts]
    if None in amounts or _unread_numbers(asked) or EXCEPT.search(request):
        return RefundAsk(orders[0], orders, how_much=True)
    with_the_verb = AMOUNT_ASKED.search(asked)
    if with_the_verb:
        return RefundAsk(orders[0], orders, amount=_written(MONEY.match(asked, with_the_verb.end())))
    if len(amounts) == 1 and not elsewhere:
        return RefundAsk(orders[0], orders, amount=amounts[0])
    unclear = amounts or elsewhere or PART.search(request) or _names_a_part(asked)
    return RefundAsk(orders[0], orders, how_much=bool(unclear), asked=asked)


def _last_asking(request: str) -> int:
    """The index (in ``_clauses(request)``) of the last clause that asks for a refund; -1 if none."""
    found = [i for i, (c, q) in enumerate(_clauses(request)) if REFUND_WORD.search(c) and _asks_for_it(c, q) == "yes"]
    return found[-1] if found else -1


# What may stand between "refund" and the order without naming a part of it ("refund my damaged order
# A-1", "a full refund for order A-1"); any other word ("the broken mug from order A-1") names a part.
_THE_ORDER = frozenset(
    "me my the a an for of on in from to with order orders it this that these those please full whole entire all "
    "everything amount money purchase payment total back now asap immediately refund refunded your our "
    "damaged broken late wrong defective faulty lost cancelled canceled last recent latest complete".split()
)


def _names_a_part(asked: str) -> bool:
    """Does the request name something of the order rather than the order ("refund the kettle on order
    A-1", "the broken mug from A-1")? How much is then asked, never taken to be all of it."""
    for match in re.finditer(r"\brefund\w*\b([^,.;!?#]*)", asked, re.IGNORECASE):
        words = re.findall(r"[a-z']+", match.group(1).lower())
        if any(word not in _THE_ORDER for word in words):
            return True
    return False


def _without_order_numbers(text: str) -> str:
    return ORDER_NUMBER.sub(lambda m: "#" * len(m.group()), text)


def _words(text: str) -> int:
    return max(1, len(text) // 4)


# A tool's error is written for the model (DESIGN: words for the model and words for customers are
# separate). Those that tell the model what to do, or speak of the machinery, are said to the customer
# in sentences of their own; one that is a plain sentence about the customer's order is said as it is.
_ERRORS_IN_CUSTOMER_WORDS = (
    (
        re.compile(r"^Not sent again: this refund failed earlier"),
        "A member of our team is checking that refund with the payment provider; you don't need to ask for it again.",
    ),
    (re.compile(r"needs a staff approval"), "That refund needs a review by a member of our team first."),
    (re.compile(r"is not enabled for this agent"), "I'm not able to do that here; a member of our team can help."),
    (re.compile(r"^not (posted|sent): a person answered"), ""),
    (
        re.compile(r"^not sent \(the mail server did not take it\)"),
        "our mail server did not accept it, so nothing was sent. A member of our team can help if you need it.",
    ),
    (re.compile(r"^(Unknown tool|Arguments for|Invalid arguments for)"), "something went wrong on my side."),
    (re.compile(r"\b(Tell the customer|do not ask|the model)\b", re.IGNORECASE), "something went wrong on my side."),
)


def _said_to_the_customer(error: str) -> str | None:
    """The error in words for the customer; None: nothing to say of it (a person has answered)."""
    for pattern, words in _ERRORS_IN_CUSTOMER_WORDS:
        if pattern.search(error):
            return words or None
    return error


def _amount(result: dict[str, Any]) -> str:
    return format_money(int(result.get("amount_cents", 0)), str(result.get("currency", "usd")))


def _refunded_before(calls: list[Done], order_number: str) -> Done | None:
    """A refund of this order that succeeded (or is pending) in an earlier turn of the conversation."""
    for call in reversed(calls):
        if call.name != "issue_refund" or str(call.args.get("order_number", "")).upper() != order_number:
            continue
        if call.result.get("status") in {"succeeded", "pending"}:
            return call
    return None


CALL_OFF = re.compile(r"\b(?:cancel|stop|withdraw|undo|reverse|call\s+off)\w*", re.IGNORECASE)


def _cancelled_after_paid(request: str, earlier: list[Done]) -> Done | None:
    """ "Please cancel the refund" written after it was paid (the customer wrote while it was carried
    out): the refund it takes back, the one of the order named, or else the last one."""
    if not REFUND_WORD.search(request) or not NOT_ASKED.search(request) or not CALL_OFF.search(request):
        return None
    named = ORDER_NUMBER.search(request)
    if named:
        return _refunded_before(earlier, named.group(1).upper())
    paid = [c for c in earlier if c.name == "issue_refund" and c.result.get("status") in {"succeeded", "pending"}]
    return paid[-1] if paid else None


# Why a refund was not made though it was decided: the customer wrote after staff approved it, or
# while the agent decided it (words it had not read), before it was carried out.
_STOPPED_BY_THE_CUSTOMER = frozenset({"customer_wrote", "customer_wrote_unread"})


def _stopped_for_the_customer(messages: list[Message]) -> Done | None:
    """The last refund of the conversation, when it was not made because the customer wrote after it
    was decided, before it was carried out (its result says so), and nothing was said to them since:
    their latest messages are the ones that stopped it. (The step that decided it may come after
    them in the conversation: it was stored after they wrote.) Automatic notices do not count."""
    pending: dict[str, tuple[str, dict[str, Any]]] = {}
    found: Done | None = None
    for message in messages:
        role, content = message["role"], str(message.get("content") or "")
        if role == "assistant" and message.get("tool_calls"):
            for call in message["tool_calls"]:
                try:
                    args = json.loads(call["function"].get("arguments") or "{}")
                except ValueError:  # not JSON, or a number too long to read
                    args = {}
                pending[call["id"]] = (call["function"]["name"], args if isinstance(args, dict) else {})
        elif role == "tool":
            name, args = pending.pop(message.get("tool_call_id", ""), ("unknown", {}))
            try:
                result = json.loads(content or "{}")
            except json.JSONDecodeError:
                result = {}
            if name == "issue_refund" and isinstance(result, dict):
                stopped = result.get("not_run_because") in _STOPPED_BY_THE_CUSTOMER
                found = Done(name, args, result) if stopped else None
        elif role == "assistant" and not content.startswith("[automatic notice]"):
            found = None  # answered since, by the agent or a person
    return found


def _takes_it_back(request: str) -> bool:
    """Does the customer stop or take back what they asked ("please cancel the refund", "never mind")?"""
    return bool(CALL_OFF.search(request) or NOT_ASKED.search(request) or TAKEN_BACK.search(request))


def _approved(stopped: Done) -> bool:
    return stopped.result.get("not_run_because") == "customer_wrote"


def _said_stopped(stopped: Done, request: str) -> str:
    """What the customer reads about a refund their message stopped: nothing was refunded; asked
    whether they still want one staff approved (asked again, it is reviewed again), unless they
    asked to stop it."""
    number = str(stopped.args.get("order_number", "")).strip().upper()
    if _takes_it_back(request) or not _approved(stopped):
        which = "the refund our team approved" if _approved(stopped) else "the refund"
        return (
            f"Okay, I have not refunded anything on order {number}: your message reached me before {which} "
            "was made, so I stopped it. Let me know if there is anything else I can do."
        )
    return (
        f"Your message reached me before the refund on order {number} that our team approved was made, so I "
        "stopped it and nothing was refunded. Would you still like it? If so, please tell me "
        f'"please refund order {number}" and our team will review it again.'
    )


_TO_BE_SURE = (
    "Just to be sure before I refund anything: would you like me to refund order {number} now, and how much? "
    'Please tell me in one message, for example "please refund order {number}".'
)


class OfflineDeterministicModel:
    """Rule-based stand-in for a chat model. Clearly not an LLM; see the module docstring."""

    name = "offline-deterministic"
    #: Never blocks: it answers at once, or streams with a delay per word that the step's meter ends.
    bounds_its_own_step = True

    def __init__(self, token_delay_ms: float | None = None) -> None:
        delay = token_delay_ms if token_delay_ms is not None else getattr(settings, "OFFLINE_MODEL_TOKEN_DELAY_MS", 0)
        self.token_delay = float(delay) / 1000

    # --- reading the conversation --------------------------------------------------

    @staticmethod
    def _current_turn(messages: list[Message]) -> tuple[str, list[Done], str, int, list[Done]]:
        """The customer's request in this turn, tool calls done so far, recovery notes, steps taken,
        and every call of earlier turns.

        The request is the customer's latest messages (the last run of user messages);
        what was done for it is every tool call after them. The conversation is in ledger
        order, so the agent's reply to an earlier message may come after this request.
        """
        last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
        first_user = last_user
        while first_user > 0 and messages[first_user - 1]["role"] == "user":
            first_user -= 1
        request_parts = [str(m.get("content") or "") for m in messages[first_user : last_user + 1] if last_user >= 0]
        earlier = OfflineDeterministicModel._calls(messages[: max(first_user, 0)])
        notes: list[str] = []
        done: list[Done] = []
        pending: dict[str, tuple[str, dict[str, Any]]] = {}
        steps = 0
        for message in messages[last_user + 1 :]:
            role = message["role"]
            if role == "system" and "RECOVERY NOTE" in str(message.get("content")):
                notes.append(str(message["content"]))
            elif role == "assistant":
                steps += 1
                for call in message.get("tool_calls") or []:
                    fn = call["function"]
                    try:
                        args = json.loads(fn.get("arguments") or "{}")
                    except ValueError:  # not JSON, or a number too long to read
                        args = {}
                    pending[call["id"]] = (fn["name"], args)
            elif role == "tool":
                name, args = pending.pop(message.get("tool_call_id", ""), ("unknown", {}))
                try:
                    result = json.loads(message.get("content") or "{}")
                except json.JSONDecodeError:
                    result = {"text": message.get("content")}
                done.append(Done(name, args, result if isinstance(result, dict) else {"value": result}))
        return "\n".join(request_parts).strip(), done, "\n".join(notes), steps, earlier

    @staticmethod
    def _calls(messages: list[Message]) -> list[Done]:
        pending: dict[str, tuple[str, dict[str, Any]]] = {}
        done: list[Done] = []
        for message in messages:
            for call in message.get("tool_calls") or []:
                try:
                    args = json.loads(call["function"].get("arguments") or "{}")
                except ValueError:  # not JSON, or a number too long to read
                    args = {}
                pending[call["id"]] = (call["function"]["name"], args)
            if message["role"] == "tool":
                name, args = pending.pop(message.get("tool_call_id", ""), ("unknown", {}))
                try:
                    result = json.loads(message.get("content") or "{}")
                except json.JSONDecodeError:
                    result = {}
                done.append(Done(name, args, result if isinstance(result, dict) else {}))
        return done

    # --- deciding ----------------------------------------------------------------

    def _next_call(
        self,
        request: str,
        done: list[Done],
        notes: str,
        tool_names: set[str],
        earlier: list[Done] | None = None,
        stopped: Done | None = None,
    ) -> tuple[str, dict[str, Any]] | None:
        text = request.lower()
        names_done = [d.name for d in done]
        order_match = ORDER_NUMBER.search(request)
        order_number = order_match.group(1).upper() if order_match else None
        refund = refund_asked(request)

        bench = BENCH.match(text.strip())
        if bench:
            if len(done) < int(bench.group(1)):
                return ("list_orders", {}) if len(done) % 2 else ("search_help", {"query": "shipping"})
            return None

        if re.search(r"\b(human|person|someone|representative|real agent|speak to|talk to)\b", text):
            return None if "hand_off_to_human" in names_done else ("hand_off_to_human", {"reason": request[:400]})

        if "email" in text and "notify_customer_by_email" in tool_names:
            if "notify_customer_by_email" in names_done:
                return None
            if "notify_customer_by_email" in notes:
                return None  # it may already have gone out: do not send it twice
            return (
                "notify_customer_by_email",
                {"subject": "Your support request", "body": f"We received your request: {request[:500]}"},
            )

        if stopped is not None and refund is None:
            if not _approved(stopped) and not _takes_it_back(request) and "issue_refund" in tool_names:
                # Decided on words read before theirs, which neither stop nor change it: made now.
                return ("issue_refund", dict(stopped.args))
            return None  # said so, and (approved by staff) asked whether it still applies

        if THANKS.match(text) and not order_number:
            return None

        if refund is None and _cancelled_after_paid(request, earlier or []) is not None:
            return None  # nothing to look up: it was paid already, and is said so

        if (
            refund is None
            and REFUND_WORD.search(text)
            and ABOUT_REFUNDS.search(text)
            and "search_help" not in names_done
        ):
            return ("search_help", {"query": "refund"})  # a question about refunds: what the policy says

        if refund is not None and (refund.orders or refund.unsure):
            if refund.order_number is None:
                return None  # several orders named for it, or the request changed: ask which one
            if _refunded_before(earlier or [], refund.order_number) and not AGAIN.search(text):
                return None  # already refunded for this request: say so, do not pay twice
            if "lookup_order" not in names_done:
                return ("lookup_order", {"order_number": refund.order_number})
            lookup = next(d for d in done if d.name == "lookup_order")
            if "error" in lookup.result or "issue_refund" not in tool_names or "issue_refund" in names_done:
                return None
            if "issue_refund" in notes and "may have" in notes:
                return None
            cents = refund.cents(lookup.result)
            if cents is None or cents <= 0:
                return None  # how much is not clear (or nothing is left): ask, or say so
            return (
                "issue_refund",
                {"order_number": refund.order_number, "amount_cents": cents, "reason": request[:300]},
            )

        if order_number:
            return None if "lookup_order" in names_done else ("lookup_order", {"order_number": order_number})
        if re.search(r"\b(my orders?|where|track|status|deliver\w*|package|parcel)\b", text):
            return None if "list_orders" in names_done else ("list_orders", {})
        return None if "search_help" in names_done else ("search_help", {"query": request[:200] or "help"})

    # --- answering ---------------------------------------------------------------

    @staticmethod
    def _compose(
        request: str, done: list[Done], notes: str, earlier: list[Done] | None = None, stopped: Done | None = None
    ) -> str:
        if BENCH.match(request.lower().strip()):
            return f"Done: {len(done)} tool calls."
        if stopped is not None and not done and refund_asked(request) is None:
            return _said_stopped(stopped, request)
        parts: list[str] = []
        order_match = ORDER_NUMBER.search(request)
        if not done and THANKS.match(request.lower()) and not order_match:
            return "You're welcome! Is there anything else I can help you with?"
        refund = refund_asked(request)
        late = _cancelled_after_paid(request, earlier or []) if refund is None and not done else None
        if late is not None:
            return (
                f"Your refund of {_amount(late.result)} on order {late.result.get('order_number')} had already "
                "been issued when your message reached me, so it can no longer be cancelled; it should reach "
                "your original payment method in 5 to 10 business days."
            )
        if refund is not None and refund.unsure and len(refund.orders) > 1:
            return f"Which order would you like me to refund: {' or '.join(refund.orders)}?"
        if refund is not None and refund.unsure:
            if len(refund.orders) == 1:
                return _TO_BE_SURE.format(number=refund.orders[0])
            return (
                "Just to be sure before I refund anything: which order would you like refunded, and how much? "
                'Please tell me in one message, for example "please refund order A-1001".'
            )
        if refund is not None and refund.order_number is None and refund.orders:
            return f"Which order would you like me to refund: {' or '.join(refund.orders)}?"
        if not done and refund is not None and refund.order_number:
            previous = _refunded_before(earlier or [], refund.order_number)
            if previous is not None and not AGAIN.search(request):
                amount = _amount(previous.result)
                return (
                    f"Your refund of {amount} on order {previous.result.get('order_number')} is already on its way; "
                    "it should reach your original payment method in 5 to 10 business days."
                )
        uncertain_email = False
        for item in done:
            result = item.result
            error = result.get("error")
            if item.name == "lookup_order":
                if error:
                    if (said := _said_to_the_customer(str(error))) is not None:
                        parts.append(f"I could not find that order: {said}")
                    continue
                line = f"Your order {result['order_number']} is {result['status']}"
                if result.get("delivered_at"):
                    line += f" (delivered on {result['delivered_at']})"
                elif result.get("shipped_at"):
                    line += f" (shipped on {result['shipped_at']})"
                parts.append(line + f"; the total was {format_money(result['total_cents'], result['currency'])}.")
            elif item.name == "list_orders":
                orders = result.get("orders", [])
                if not orders:
                    parts.append("I don't see any orders on your account.")
                else:
                    listed = ", ".join(f"{o['order_number']} ({o['status']})" for o in orders[:5])
                    parts.append(f"Here are your recent orders: {listed}.")
            elif item.name == "search_help":
                articles = result.get("articles", [])
                if articles:
                    first = articles[0]
                    summary = " ".join(re.split(r"(?<=\.)\s+", first["body"])[:2])
                    parts.append(f"From our help center, {first['title']}: {summary}")
                else:
                    parts.append("I couldn't find a help article about that; could you tell me a little more?")
            elif item.name == "issue_refund":
                if result.get("cancelled"):
                    parts.append(
                        f"Okay, I have not refunded anything on order {item.args.get('order_number', '')}. "
                        "Let me know if there is anything else I can do."
                    )
                elif result.get("status") == "rejected_by_staff" or result.get("rejected"):
                    note = result.get("note") or "no reason given"
                    parts.append(f"A member of our team reviewed the refund and could not approve it ({note}).")
                elif error:
                    said = _said_to_the_customer(str(error))
                    if said is not None and said != str(error) and said[0].isupper():
                        parts.append(said)
                    elif said is not None:
                        parts.append(f"I couldn't issue that refund: {said}")
                elif result.get("status") == "awaiting_approval":
                    parts.append("Your refund request is waiting for a member of our team to review it.")
                elif result.get("status") == "pending":
                    amount = _amount(result)
                    parts.append(
                        f"I've submitted a refund of {amount} on order {result.get('order_number')}; "
                        "the payment provider is processing it and it should reach you in 5 to 10 business days."
                    )
                else:
                    amount = _amount(result)
                    parts.append(
                        f"I've refunded {amount} on order {result.get('order_number')}. "
                        "It should reach your original payment method in 5 to 10 business days."
                    )
            elif item.name == "hand_off_to_human":
                parts.append("I've passed your ticket to a member of our team; they will reply here shortly.")
            elif item.name == "notify_customer_by_email":
                if result.get("status") == "uncertain":
                    # It may have gone out: said below in words for the customer, not in the model's note.
                    uncertain_email = True
                else:
                    said = _said_to_the_customer(str(error)) if error else None
                    if not error:
                        parts.append("I've emailed you a summary.")
                    elif said is not None:
                        parts.append(f"I couldn't send the email: {said}")
        lookup = next((d.result for d in done if d.name == "lookup_order" and "error" not in d.result), None)
        if refund is not None and refund.order_number and lookup and "issue_refund" not in {d.name for d in done}:
            if not refund.how_much and not refund.plain(lookup):
                parts.append(_TO_BE_SURE.format(number=refund.order_number))
            elif refund.cents(lookup) is None:
                example = _example_amount(min(2000, int(lookup.get("total_cents", 0))), str(lookup.get("currency")))
                parts.append(
                    f"How much of order {refund.order_number} would you like refunded? Tell me the amount in "
                    f'{str(lookup.get("currency")).upper()}, for example "refund {example} on {refund.order_number}".'
                )
        if uncertain_email or ("notify_customer_by_email" in notes and "email" in request.lower()):
            parts.append(
                "An email to you may already have gone out before a restart on our side; "
                "please check your inbox before asking me to send another."
            )
        if not parts:
            return "Thanks for reaching out! How can I help you with your order today?"
        return " ".join(parts)

    def complete(
        self,
        *,
        messages: list[Message],
        tools: list[ToolSpec],
        on_token: TokenCallback | None = None,
    ) -> ModelResponse:
        request, done, notes, steps, earlier = self._current_turn(messages)
        tool_names = {spec["function"]["name"] for spec in tools}
        prompt_tokens = sum(_words(json.dumps(m, default=str)) for m in messages)
        stopped = _stopped_for_the_customer(messages)
        # A refund their words stopped is said as such (``_said_stopped``), or made again; not said failed.
        done = [d for d in done if d.result.get("not_run_because") not in _STOPPED_BY_THE_CUSTOMER]
        call = self._next_call(request, done, notes, tool_names, earlier, stopped)
        if call is not None:
            # Unique in the whole conversation, which holds earlier turns' calls too.
            asked = sum(1 for m in messages if m["role"] == "assistant" and m.get("tool_calls"))
            name, args = call
            arguments = json.dumps(args, sort_keys=True)
            return ModelResponse(
                text="",
                tool_calls=[ToolCallRequest(id=f"call_{asked + 1}_0", name=name, arguments=arguments)],
                usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=_words(name + arguments)),
                model=self.name,
                finish_reason="tool_calls",
            )
        text = self._compose(request, done, notes, earlier, stopped)
        if on_token is not None:
            for token in re.findall(r"\S+\s*", text):
                on_token(token)
                if self.token_delay:
                    time.sleep(self.token_delay)
        return ModelResponse(
            text=text,
            usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=_words(text)),
            model=self.name,
            finish_reason="stop",
        )
