"""Real users' web queries for `ragbus eval-intent`: DL-HARD's 400 annotated TREC DL queries.

DL-HARD (Mackie, Dalton and Yates, SIGIR 2021; github.com/grill-lab/DL-Hard) annotates the
queries of the TREC Deep Learning 2019 and 2020 tracks (questions typed into Bing, from MS
MARCO) with a query intent, starting from the answer type a web search engine gives each one.
They are short web queries, some phrased as questions ("how does vitamin c helps"), some as
keywords ("weather in novi sad", "estar meaning"), with the typos and casing people type.
Nothing here trains on them: this writes them as `{text, label, source}` rows for
`ragbus eval-intent --data`, from a clone of the repository (its files stay out of ours):

    git clone https://github.com/grill-lab/DL-Hard /tmp/dl-hard
    python -m studies.dl_hard /tmp/dl-hard --out /tmp/dl-hard.jsonl
    ragbus eval-intent --data /tmp/dl-hard.jsonl --out results/intent-dl-hard.json

How its intents map to ours (`INTENTS`), and why:

- description, entity, attribute, quantity, list, temporal, location, language, reason,
  verification, weather → `factual`: the user wants to know something (a fact, a definition,
  an explanation, a yes or no);
- process → `procedural`: how to do something ("how to uninstall xbox from windows 10");
- advice → `recommendation`: what to choose ("what is the best music maker");
- resource → `navigation`: a particular source (a form, a site, a number to call);
- calculation → left out: a distance between two towns or a unit conversion is a lookup to
  some people and a calculator's job to others; our `tool` intent is the second, and the
  annotation does not say which.

So the set is mostly `factual` (a good route sends a real web query to the prior's weights),
with a few rows of three other intents: read its accuracy and its rows by form (keyword
queries against questions), not its macro-F1.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path
from typing import Final

from studies.keyword_topics import write_rows

ANNOTATIONS: Final = Path("annotations/query/annotations.tsv")
_FACTUAL_KINDS: Final = (
    "description",
    "entity",
    "attribute",
    "quantity",
    "list",
    "temporal",
    "location",
    "language",
    "reason",
    "verification",
    "weather",
)
INTENTS: Final[dict[str, str | None]] = {
    **dict.fromkeys(_FACTUAL_KINDS, "factual"),
    "process": "procedural",
    "advice": "recommendation",
    "resource": "navigation",
    "calculation": None,
}
"""DL-HARD's query intent → ours; `None` leaves the row out (the module says why)."""


def query_rows(clone: Path) -> list[dict[str, str]]:
    """Every annotated query whose intent maps to ours, in the file's order, each once."""
    rows: list[dict[str, str]] = []
    seen: set[str] = set()
    with (clone / ANNOTATIONS).open(encoding="utf-8", newline="") as handle:
        for fields in csv.reader(handle, delimiter="\t"):
            if len(fields) < 3:
                continue
            query_id, text, kind = fields[0], fields[1].strip(), fields[2].strip().lower()
            if kind not in INTENTS:
                raise ValueError(f"{ANNOTATIONS}: query {query_id} has an unknown intent {kind!r}")
            label = INTENTS[kind]
            if label is None or not text or text in seen:
                continue
            seen.add(text)
            rows.append({"text": text, "label": label, "source": f"dl-hard:{kind}"})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("clone", type=Path, help="a clone of github.com/grill-lab/DL-Hard")
    parser.add_argument("--out", type=Path, required=True, help="JSONL of {text, label, source}")
    args = parser.parse_args(argv)
    rows = query_rows(args.clone)
    write_rows(args.out, rows)
    print(f"wrote {len(rows)} queries to {args.out}")


if __name__ == "__main__":
    main()
