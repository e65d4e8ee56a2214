"""The Cranfield collection as a BEIR directory: a third retrieval set, of another domain.

Cranfield (Cleverdon, 1967) is 1,400 abstracts of aeronautical engineering papers, 225 queries
written by the papers' authors, and their relevance judgments: the first test collection of
information retrieval, public and small. Its domain (aerodynamics, heat transfer, structures)
is neither NFCorpus's nutrition and medicine nor MuSiQue's Wikipedia, so `ragbus eval` on it
says whether fusion's gain holds where nothing was tuned (issue 20). Nothing here is tuned on
it: it is read once, through the same pipeline, with the same settings.

The source is the TREC-formatted copy at https://github.com/oussbenk/cranfield-trec-dataset
(`cran.all.1400.xml`, `cran.qry.xml`, `cranqrel.trec.txt`); its files are not copied into
this repository. This writes the BEIR layout `ragbus eval --beir` reads:

    git clone https://github.com/oussbenk/cranfield-trec-dataset /tmp/cranfield-src
    python -m studies.cranfield /tmp/cranfield-src --out /tmp/cranfield
    ragbus eval --beir /tmp/cranfield --out results/eval-cranfield.json

Two facts of the collection decide the conversion:
- the relevance judgments number the queries 1 to 225 in the order the query file holds them,
  while the query file keeps the original, gapped numbers (1, 2, 4, 8, ... 365): so the i-th
  query is query `i`, whatever its `<num>` says;
- the judgments were graded (1 to 4 relevant, -1 judged of no interest); the TREC copy keeps
  them binary (1 relevant, 0 not), and so does this (BEIR's qrels list the relevant ones).
"""

from __future__ import annotations

import argparse
import html
import json
import re
from pathlib import Path

DOC = re.compile(r"<doc>(.*?)</doc>", re.S)
TOP = re.compile(r"<top>(.*?)</top>", re.S)


def _field(block: str, tag: str) -> str:
    found = re.search(rf"<{tag}>(.*?)</{tag}>", block, re.S)
    return " ".join(html.unescape(found.group(1)).split()) if found else ""


def documents(path: Path) -> list[dict[str, str]]:
    """`{_id, title, text}` per abstract; the text without its first line, which repeats the
    title (a chunk would otherwise carry the title twice)."""
    out = []
    for block in DOC.findall(path.read_text(encoding="utf-8")):
        doc_id, title, text = _field(block, "docno"), _field(block, "title"), _field(block, "text")
        if text.startswith(title):
            text = text[len(title) :].strip()
        out.append({"_id": doc_id, "title": title, "text": text})
    return out


def queries(path: Path) -> list[dict[str, str]]:
    """`{_id, text}` per query, numbered 1.. in file order (the judgments' numbering)."""
    blocks = TOP.findall(path.read_text(encoding="utf-8"))
    return [{"_id": str(n), "text": _field(block, "title")} for n, block in enumerate(blocks, 1)]


def judgments(path: Path) -> list[tuple[str, str, int]]:
    """(query, document, 1) for each relevant pair: `TOPIC ITERATION DOCNO RELEVANCY` rows."""
    relevant = []
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if len(fields) >= 4 and int(fields[3]) > 0:
            relevant.append((fields[0], fields[2], 1))
    return relevant


def convert(source: Path, out: Path) -> dict[str, int]:
    docs = documents(source / "cran.all.1400.xml")
    topics = queries(source / "cran.qry.xml")
    qrels = judgments(source / "cranqrel.trec.txt")
    known_docs = {d["_id"] for d in docs}
    known_topics = {q["_id"] for q in topics}
    qrels = [row for row in qrels if row[0] in known_topics and row[1] in known_docs]
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(d) + "\n" for d in docs)
    with (out / "queries.jsonl").open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(q) + "\n" for q in topics)
    with (out / "qrels" / "test.tsv").open("w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        fh.writelines(f"{q}\t{d}\t{s}\n" for q, d, s in qrels)
    judged = {q for q, _, _ in qrels}
    return {
        "documents": len(docs),
        "queries": len(topics),
        "judged": len(judged),
        "qrels": len(qrels),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="a checkout of oussbenk/cranfield-trec-dataset")
    parser.add_argument("--out", type=Path, required=True, help="the BEIR directory to write")
    args = parser.parse_args(argv)
    counts = convert(args.source, args.out)
    print(f"wrote {args.out}: {counts}")


if __name__ == "__main__":
    main()
