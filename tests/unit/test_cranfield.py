"""The Cranfield conversion: the judgments number the queries in file order, not by their
gapped `<num>`, and only relevant pairs become BEIR qrels."""

from __future__ import annotations

import json
from pathlib import Path

from bench.evaluation.beir import load_beir
from studies.cranfield import convert

DOCS = """<doc>
<docno>1</docno>
<title>experimental investigation of a
wing in a slipstream .</title>
<author>brenckman,m.</author>
<bib>j. ae. scs. 25, 1958, 324.</bib>
<text>experimental investigation of a
wing in a slipstream .
  an experimental study of a wing in a propeller slipstream .</text>
</doc>
<doc>
<docno>2</docno>
<title>simple shear flow past a flat plate .</title>
<author>ting-yili</author>
<bib>department of aeronautical engineering.</bib>
<text>simple shear flow past a flat plate &amp; its boundary layer .</text>
</doc>
"""

QUERIES = """<?xml version='1.0' encoding='utf-8' standalone='yes'?>
<xml>
<top>
<num> 1</num>
<title>
what is the lift of a wing in a slipstream .
</title>
</top>
<top>
<num> 4</num>
<title>
shear flow past plates .
</title>
</top>
</xml>
"""

QRELS = "1 0 1 1\n1 0 2 0\n2 0 2 1\n2 0 99 1\n"


def test_the_collection_becomes_a_beir_directory(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "cran.all.1400.xml").write_text(DOCS)
    (source / "cran.qry.xml").write_text(QUERIES)
    (source / "cranqrel.trec.txt").write_text(QRELS)
    out = tmp_path / "beir"
    counts = convert(source, out)
    assert counts == {"documents": 2, "queries": 2, "judged": 2, "qrels": 2}
    beir = load_beir(out)
    # the second query in the file is query 2, though its <num> says 4
    assert beir.queries == {
        "1": "what is the lift of a wing in a slipstream .",
        "2": "shear flow past plates .",
    }
    # a pair judged of no interest is left out, and so is one whose document does not exist
    assert beir.qrels == {"1": {"1": 1}, "2": {"2": 1}}
    docs = [json.loads(line) for line in (out / "corpus.jsonl").read_text().splitlines()]
    assert docs[0] == {
        "_id": "1",
        "title": "experimental investigation of a wing in a slipstream .",
        "text": "an experimental study of a wing in a propeller slipstream .",
    }
    assert docs[1]["text"] == "simple shear flow past a flat plate & its boundary layer ."
