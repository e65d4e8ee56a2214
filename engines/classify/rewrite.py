"""Follow-up questions made standalone from the conversation before them, without a model.

A follow-up leans on what was said before in three ways, and each has a rule:
- a pronoun ("Who was *its* chief engineer?"): replaced by the phrase it stands for, a
  possessive turned around ("the chief engineer of the Halvorsen Bridge");
- an ellipsis ("What about aspirin?"): the previous question, asked again of the new subject;
- a bare question ("Why?", "And when?"): the previous question's subject added.

What a pronoun stands for is looked for in the turns before it, the latest first: a person
pronoun (he, she) prefers a name the previous *answer* introduced, anything else the
previous question's subject — a name or symbol first, then a noun phrase that follows a
preposition ("side effects *of statins*") over the generic head it follows. A question
with none of these marks is left as it was: a standalone question must never be damaged to
help a follow-up.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from contracts.queries import MAX_QUERY_CHARS
from contracts.sessions import SessionTurn
from infra.retrieval.entities import extract_entities, tokenize
from infra.retrieval.lexical import STOP_WORDS

NEUTER: Final = frozenset({"it", "they", "them", "itself", "themselves"})
PERSON: Final = frozenset({"he", "she", "him", "himself", "herself"})
POSSESSIVE: Final = frozenset({"its", "their", "his", "her"})
"""`her` is possessive before a noun ("her novels"), an object pronoun otherwise."""
PERSONAL_POSSESSIVE: Final = frozenset({"his", "her"})
DEMONSTRATIVE: Final = frozenset({"this", "that", "these", "those"})
QUESTION_WORDS: Final = frozenset(
    {"what", "which", "who", "whom", "whose", "when", "where", "why", "how", "else"}
)
GENERIC_HEADS: Final = frozenset(
    {
        "effect", "effects", "risk", "risks", "benefit", "benefits", "cause", "causes",
        "symptom", "symptoms", "treatment", "treatments", "role", "difference", "use", "uses",
        "type", "types", "kind", "kinds", "level", "levels", "amount", "part", "history",
        "side", "name", "meaning", "purpose", "result", "results", "impact", "source",
    }
)  # fmt: skip
"""Nouns a question asks *about* something with; the something is the subject."""
_VERBS: Final = frozenset(
    {"is", "are", "was", "were", "be", "been", "do", "does", "did", "has", "have", "had",
     "can", "could", "will", "would", "should", "may", "might", "must"}
)  # fmt: skip
COMMON_VERBS: Final = frozenset(
    {"cause", "causes", "caused", "reduce", "reduces", "increase", "increases", "prevent",
     "prevents", "affect", "affects", "help", "helps", "improve", "improves", "lower",
     "lowers", "raise", "raises", "contain", "contains", "lead", "leads", "treat", "treats",
     "protect", "protects", "interact", "interacts", "make", "makes", "made", "mean", "means",
     "need", "needs", "work", "works", "worked", "get", "gets", "become", "became", "live",
     "lived", "die", "died", "born", "built", "write", "wrote", "written", "play", "played",
     "win", "won", "found", "founded", "start", "started", "come", "came", "go", "went",
     "take", "took", "use", "used", "say", "said", "change", "changed", "happen", "happened"}
)  # fmt: skip
"""Verbs common in questions: a noun phrase ends where one starts ("green tea | reduce")."""
_AUX_AFTER_DEMONSTRATIVE: Final = frozenset(
    {"is", "are", "was", "were", "do", "does", "did", "has", "have", "had", "can", "could",
     "will", "would", "should", "mean", "means", "cause", "causes", "work", "works", "happen"}
)  # fmt: skip
_ELLIPSIS = re.compile(
    r"^\s*(?:(?:and|but|so)\s+)?(?:what|how)\s+about\s+(?P<subject>.+?)\s*[?.!]*\s*$"
    r"|^\s*and\s+(?P<short>[^?.!]{1,60}?)\s*\?\s*$",
    re.IGNORECASE,
)
_EXPLETIVE = re.compile(r"\bit\s+(?:is|was|'s)\s+\w+\s+to\b", re.IGNORECASE)
_WORD = re.compile(r"[^\W_]+(?:[-'’][^\W_]+)*", re.UNICODE)


@dataclass(frozen=True)
class Rewrite:
    standalone: str
    method: str
    """`none` (kept as asked), `rules` or `llm`."""
    antecedent: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "standalone", self.standalone[:MAX_QUERY_CHARS])


def rewrite(query: str, history: Sequence[SessionTurn]) -> Rewrite:
    """The query made standalone from `history` (earlier turns, oldest first)."""
    text = " ".join(query.split())
    if not history or not text:
        return Rewrite(text, "none")
    ellipsis = _ELLIPSIS.match(text)
    words = [w.lower() for w in _WORD.findall(text)]
    if ellipsis:
        subject = (ellipsis.group("subject") or ellipsis.group("short") or "").strip()
        own = [w.lower() for w in _WORD.findall(subject)]
        done = None if _referring_words(subject, own) else _ask_again(subject, history)
        if done is not None:
            return done
    person = any(w in PERSON or w in PERSONAL_POSSESSIVE for w in words)
    marks = _referring_words(text, words)
    if marks:
        antecedent = _antecedent(history, person=person)
        if antecedent is not None:
            replaced = re.sub(r"^(?:and|but|so)\s+", "", _replace(text, antecedent), flags=re.I)
            return Rewrite(_capitalised(replaced), "rules", antecedent)
    if _is_bare(words):
        antecedent = _antecedent(history, person=False)
        if antecedent is not None:
            stem = text.rstrip(" ?.!")
            stem = re.sub(r"^(?:and|but|so|also)\s+", "", stem, flags=re.IGNORECASE)
            return Rewrite(f"{stem[:1].upper()}{stem[1:]} ({antecedent})?", "rules", antecedent)
    return Rewrite(text, "none")


def _referring_words(text: str, words: list[str]) -> bool:
    pronoun = any(w in NEUTER | PERSON | POSSESSIVE for w in words)
    expletive = bool(_EXPLETIVE.search(text)) and not any(w in POSSESSIVE | PERSON for w in words)
    if pronoun and not expletive:  # not the "it" of "it is hard to say"
        return True
    return any(
        w in DEMONSTRATIVE and (i + 1 == len(words) or words[i + 1] in _AUX_AFTER_DEMONSTRATIVE)
        for i, w in enumerate(words)
    )


def _refers_back(text: str) -> bool:
    return _referring_words(text, [w.lower() for w in _WORD.findall(text)])


def _is_bare(words: list[str]) -> bool:
    """A question with nothing of its own to search for: "Why?", "And when was that?"."""
    content = [w for w in words if w not in STOP_WORDS and w not in QUESTION_WORDS]
    return bool(words) and not content and len(words) <= 6


# ----------------------------------------------------------------- antecedents
def _antecedent(history: Sequence[SessionTurn], *, person: bool) -> str | None:
    for turn in reversed(history):
        if turn.standalone_query is None and _refers_back(turn.query):
            continue  # itself a follow-up not resolved yet: what it means is further back
        if person and turn.answer:
            named = _new_name(turn.answer, turn.context_text)
            if named:
                return named
        subject = subject_of(turn.context_text)
        if subject:
            return subject
    return None


def _new_name(answer: str, question: str) -> str | None:
    """The answer's most prominent multi-word name (the extractor's ranking: names before
    terms, the more often named first) that the question did not give."""
    asked = question.lower()
    cleaned = re.sub(r"\[\d+\]", " ", answer)
    for entity in extract_entities(cleaned, limit=10):
        if entity.kind == "proper" and " " in entity.name and entity.name.lower() not in asked:
            return entity.name
    return None


def subject_of(question: str) -> str | None:
    """What a question is about: its first name or symbol, else the noun phrase after a
    preposition, else its longest noun phrase."""
    names = [e for e in extract_entities(question, limit=10) if e.kind in ("proper", "acronym")]
    if names:
        first = min(names, key=lambda e: _position(question, e.name))
        return _with_article(question, first.name)
    phrases = _noun_phrases(question)
    if not phrases:
        return None
    return max(phrases, key=lambda p: (p[1], p[2]))[0]


def _position(text: str, name: str) -> int:
    found = text.find(name)
    return found if found >= 0 else len(text)


def _with_article(text: str, name: str) -> str:
    """`the Halvorsen Bridge` when the question said so."""
    at = text.find(name)
    if at >= 4 and text[at - 4 : at].lower() == "the ":
        return f"the {name}"
    return name


def _noun_phrases(question: str) -> list[tuple[str, int, int]]:
    """Runs of content words: (phrase, score, -position). A run whose head (last word) is
    generic ("side effects") scores lower than the subject it asks about, and of equal runs
    the first, the grammatical subject, wins. In a question opened by an auxiliary ("Does
    green tea reduce ...", "Is coffee bad for ...") the subject run ends before its verb or
    predicate."""
    tokens = tokenize(question)
    aux_first = bool(tokens) and tokens[0].lower() in _VERBS
    runs: list[tuple[list[str], int, str | None]] = []  # words, start, the word after
    run: list[str] = []
    start = 0
    for i, token in enumerate(tokens):
        low = token.lower()
        if low in STOP_WORDS or low in QUESTION_WORDS or low in _VERBS or low in COMMON_VERBS:
            if run:
                runs.append((run, start, low))
            run = []
            continue
        if not run:
            start = i
        run.append(token)
    if run:
        runs.append((run, start, None))
    phrases: list[tuple[str, int, int]] = []
    for n, (words, at, after) in enumerate(runs):
        if n == 0 and aux_first and len(words) > 1 and after not in COMMON_VERBS:
            words = words[:-1]  # "coffee bad", "green tea healthy": the predicate goes
        generic = words[-1].lower() in GENERIC_HEADS
        phrases.append((" ".join(words), 0 if generic else 1, -at))
    return phrases


# ----------------------------------------------------------------- rewriting
def _replace(text: str, antecedent: str) -> str:
    tokens = re.split(r"(\W+)", text)
    out: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        low = token.lower()
        nxt = _next_word(tokens, i)
        if low in POSSESSIVE and nxt is not None and (low != "her" or _is_noun_like(tokens[nxt])):
            # "its chief engineer" -> "the chief engineer of the Halvorsen Bridge"
            end = nxt
            while True:
                following = _next_word(tokens, end)
                if following is None or not _is_noun_like(tokens[following]):
                    break
                if "".join(tokens[end + 1 : following]).strip():
                    break  # punctuation between: the phrase ended
                end = following
            phrase = "".join(tokens[nxt : end + 1])
            out.append(f"{'The' if token[:1].isupper() else 'the'} {phrase} of {antecedent}")
            i = end + 1
            continue
        if low in NEUTER | PERSON | {"her"} or (
            low in DEMONSTRATIVE
            and (nxt is None or tokens[nxt].lower() in _AUX_AFTER_DEMONSTRATIVE)
        ):
            out.append(_capitalised(antecedent) if i == 0 else antecedent)
            i += 1
            continue
        out.append(token)
        i += 1
    return "".join(out)


def _next_word(tokens: list[str], i: int) -> int | None:
    for j in range(i + 1, len(tokens)):
        if tokens[j] and re.match(r"\w", tokens[j]):
            return j
    return None


def _is_noun_like(word: str) -> bool:
    low = word.lower()
    return low not in STOP_WORDS and low not in QUESTION_WORDS and low not in _VERBS


def _is_name(text: str) -> bool:
    """A proper name or a number ("the Enola Gay", "the 41st"), not a common noun phrase."""
    return any(word[:1].isupper() or word[:1].isdigit() for word in text.split())


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


def _ask_again(subject: str, history: Sequence[SessionTurn]) -> Rewrite | None:
    """ "What about aspirin?" after "What are the side effects of statins?" -> "What are the
    side effects of aspirin?"."""
    if not subject or len(subject.split()) > 8:
        return None
    previous = history[-1].context_text
    old = subject_of(previous)
    if old and _is_name(old) and not _is_name(subject):
        # an aspect of the same subject ("What about the death toll?" after a question about
        # the Enola Gay), not a new subject to ask the previous question of
        return Rewrite(f"What about {subject} of {old}?", "rules", old)
    if old and old in previous:
        return Rewrite(previous.replace(old, subject, 1), "rules", old)
    return Rewrite(f"{previous.rstrip(' ?.!')}: {subject}?", "rules", None)
