"""Keyword queries: a bare noun phrase asks about its topic unless a word says otherwise.

People type most searches as keywords: a topic ("vitamin k", "panama canal locks"), a
product or a place, a site's name with "login". The intent models learn from questions, whose
wording carries the intent ("how do I …", "which is better …"); a keyword query has no such
wording, so what a model reads into it is mostly noise. Measured on real users' web queries,
that noise sent factual keyword queries to procedural, recommendation, navigation and tool.

So for a keyword query (no question word first, no `?`, no imperative verb, a few words)
only the intents that a word in it names may win over `factual`: `how to` or `install` for
procedural, `best` or `review` for recommendation, `vs` for comparison, `login`, `website`,
`pdf` or `manual` for navigation, and so on (`KEYWORD_CUES`). A model's other answers fall
back to `factual`, whose weights are the prior's: a keyword query that the cues misjudge
costs nothing over not classifying it at all. These are the conventions of web-search intent
taxonomies (Broder 2002; Jansen et al. 2008), not fitted to any data set.

One kind of word decides rather than allows: a web address or an account's door (`www`,
`https`, a domain such as `irs.gov`, `login`, `sign in`, `sign up`, `homepage`, `official
site`; `SITE_CUES`). Whoever types "gmail login" wants a particular site, which is what
`navigation` means (Broder's navigational queries; the labelling functions that made
ORCAS-I's training labels, Alexander et al. 2022, call such a query navigational on these
words alone). The trained models, which learned `navigation` from requests for a document in
the collection ("the onboarding pdf"), read these words as a topic: "gmail login" came out
`factual` at 0.48 with `navigation` not among its first three. So a keyword query with such a
word may not be `factual`; the model still chooses among `navigation` and any other intent its
words name ("facebook login fix"). A well-known site's bare name ("youtube", "the guardian";
`site_names`) decides the same way: ORCAS-I's rules call it navigational by the clicked
site's domain, which a query does not carry here, so a list of the most linked sites stands in.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files
from typing import Final

from contracts.enums import Intent

MAX_KEYWORD_WORDS: Final = 6
"""Longer queries without a question word are sentences more often than keyword strings."""

_QUESTION_START = re.compile(
    r"^\W*(?:what|what's|whats|who|whom|whose|when|where|why|which|how|is|are|was|were|do|does"
    r"|did|can|could|should|would|will|shall|may|might|must|has|have|had|am|isn't|aren't"
    r"|doesn't|don't|didn't|can't|won't)\b",
    re.IGNORECASE,
)
_IMPERATIVE_START = re.compile(
    r"^\W*(?:find|show|list|give|tell|explain|describe|compare|summari[sz]e|calculate|compute"
    r"|convert|recommend|suggest|help|open|search|look|define|translate|name|please|go|get"
    r"|locate|read|see|check|brief|contrast|walk|i|we|my)\b",
    re.IGNORECASE,
)


def _words(*alternatives: str) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(alternatives) + r")\b", re.IGNORECASE)


KEYWORD_CUES: Final[dict[Intent, re.Pattern[str]]] = {
    Intent.PROCEDURAL: _words(
        r"how to|howto|tutorial|guide|steps?|instructions?|install\w*|set ?up|configur\w*",
        r"fix|repair|troubleshoot\w*|recipes?|diy|make|build|cook|clean|remove|reset|cancel",
    ),
    Intent.RECOMMENDATION: _words(
        r"best|top|good|recommend\w*|suggest\w*|reviews?|rated|alternatives?|ideas|tips|advice",
        r"cheapest|should",
    ),
    Intent.COMPARISON: _words(r"vs\.?|versus|compar\w*|differences?|better|or"),
    Intent.NAVIGATION: re.compile(  # a site's address or door decides instead: SITE_CUES
        r"\b(?:website|web site|official"
        r"|site|portal|account|url|link|pdf|manual|docs|documentation|handbook|datasheet"
        r"|download|page|section|chapter|document|file|form|white ?paper|paper|report|slides"
        r"|spec|specification|readme|faq|wiki|changelog|release notes|policy|template|doc"
        r"|reference|checklist|guide)\b"
        r"|\.(?:com|org|net|gov|edu|io)\b",
        re.IGNORECASE,
    ),
    Intent.SUMMARY: _words(
        r"summary|summaries|overview|tl;?dr|outline|synopsis|recap|gist|highlights",
        r"(?:main|key) (?:points?|themes?|ideas?|topics?|takeaways?|findings|lessons)|takeaways?",
    ),
}
"""A word that names the intent in a keyword query. `tool` has its own test
(`rules.has_calculation_cue`) and `factual` needs none."""


def is_keyword_query(query: str) -> bool:
    """A few words that neither ask (no question word first, no `?`) nor tell (no imperative
    verb first): what people type into a search box."""
    text = query.strip()
    if not text or "?" in text or len(text.split()) > MAX_KEYWORD_WORDS:
        return False
    return not (_QUESTION_START.match(text) or _IMPERATIVE_START.match(text))


SITE_CUES: Final = re.compile(
    r"\b(?:log ?in|log ?on|sign ?in|sign ?on|sign ?up|www|https?|home ?page"
    r"|official (?:web ?)?site)\b"
    r"|\b[a-z0-9-]+\.(?:com|org|net|gov|edu|io|co|us|uk|ca|au|de|fr|in|info|biz|me|tv|app)\b",
    re.IGNORECASE,
)
"""Words that name a web site or an account's door: a keyword query with one is navigational
(the module says why)."""


@cache
def site_names() -> frozenset[str]:
    """Well-known web sites' names (`intent_data/site_names.txt`; `studies.site_names` says where
    they come from and which are left out)."""
    listed = files("engines.classify").joinpath("intent_data", "site_names.txt")
    lines = listed.read_text(encoding="utf-8").splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def names_a_site(query: str) -> bool:
    """The whole query is a well-known site's name, however it is spaced or cased: "youtube",
    "The Guardian", "NYTimes" (not "new york times": the site's name is its domain's)."""
    return re.sub(r"[^a-z]", "", query.lower()) in site_names()


def keyword_intents(query: str) -> frozenset[Intent]:
    """The intents a keyword query's words name: `factual` and those its cues name, or, with a
    site's address or door in it (`SITE_CUES`) or a well-known site's bare name
    (`names_a_site`), `navigation` and the others its cues name."""
    named = {intent for intent, cue in KEYWORD_CUES.items() if cue.search(query)}
    if SITE_CUES.search(query) or names_a_site(query):
        return frozenset({Intent.NAVIGATION, *named})
    return frozenset({Intent.FACTUAL, *named})


QUANTITY_QUESTION: Final = re.compile(
    r"^\W*how (?:much|many|long|often|old|far|big|small|tall|short|large|high|low|fast|deep"
    r"|heavy|wide|soon|early|late|hot|cold|warm|expensive|cheap)\b",
    re.IGNORECASE,
)
"""A question whose answer is a number or an amount: "how much does a passport cost", "how
long to bake a potato", "how many bones in the human body"."""

_THAN = _words(r"than|vs\.?|versus|compared")


def quantity_intents(query: str) -> frozenset[Intent] | None:
    """The intents a question that asks for a quantity may go to, or None for any other query.

    Its answer is a number (the `NUMERIC` class of Li and Roth's question taxonomy, 2002), so it
    asks for a fact: `factual`, or the calculator when it holds a calculation
    (`rules.has_calculation_cue` decides that), or a comparison when it weighs two things ("how
    much bigger than"). The model reads "how long do I cook artichokes" as `procedural` and
    "how much do motivational speakers make" as `recommendation` from the words around the
    quantity; the bundled training rows call every such question `factual` or `tool`."""
    if not QUANTITY_QUESTION.match(query):
        return None
    return frozenset(
        {Intent.FACTUAL, Intent.TOOL} | ({Intent.COMPARISON} if _THAN.search(query) else set())
    )
