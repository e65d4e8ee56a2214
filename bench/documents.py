"""How faithfully, and how fast, ragbus reads documents kept as files (issue 46).

A BEIR set (NFCorpus) is rendered twice, from its own text:
- every document as a PDF with a text layer (`text-pdf/`), set in DejaVu Sans, the title as a
  heading and in the PDF's metadata;
- a subset of about 500 documents as scans (`scan-pdf/`): the same PDF's pages rasterised
  to greyscale images, put back into a PDF with no text layer, so only OCR can read them. The
  subset is made of whole queries' relevant documents (queries with the fewest first), so every
  query kept is judged on documents that all are there.

`fidelity` parses every file with the parser the parse worker runs (`infra.documents`) and
scores the extracted words against the source text (recall of the source's word multiset,
micro-averaged), and times it: pages a minute, one process, text layers and scans apart.
`beir-*` folders hold each version's queries and qrels with the document ids the files are
ingested under, so `ragbus ingest` of a folder and `ragbus eval --skip-ingest` of its
`beir-*` score retrieval from the files against the plain text of the same documents.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.evaluation.beir import BeirSet, load_beir

FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
SCAN_DPI = 200
"""A scanner's everyday resolution for office documents."""
_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class Source:
    id: str
    title: str
    text: str

    @property
    def words(self) -> str:
        return f"{self.title}\n{self.text}"


def read_corpus(path: Path) -> Iterator[Source]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                text = str(row.get("text") or "")
                if text.strip():
                    yield Source(str(row["_id"]), str(row.get("title") or ""), text)


def file_name(doc_id: str, suffix: str = ".pdf") -> str:
    """A document's file: its id, which is a safe file name in the BEIR sets used here."""
    if "/" in doc_id or doc_id.startswith("."):
        raise ValueError(f"document id {doc_id!r} is no file name")
    return doc_id + suffix


def render_pdf(source: Source, path: Path) -> int:
    """`source` as a PDF with a text layer; its number of pages."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(True, margin=20)
    pdf.add_font("DejaVu", "", str(FONT_DIR / "DejaVuSans.ttf"))
    pdf.add_font("DejaVu", "B", str(FONT_DIR / "DejaVuSans-Bold.ttf"))
    pdf.set_title(source.title)
    pdf.add_page()
    if source.title:
        pdf.set_font("DejaVu", "B", 14)
        pdf.multi_cell(0, 7, source.title)
        pdf.ln(3)
    pdf.set_font("DejaVu", "", 11)
    pdf.multi_cell(0, 5.5, source.text)
    pdf.output(str(path))
    return int(pdf.pages_count)


def render_scan(text_pdf: Path, path: Path, dpi: int = SCAN_DPI) -> int:
    """The pages of `text_pdf` as greyscale images in a PDF with no text layer."""
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(str(text_pdf))
    try:
        images = [
            document[index].render(scale=dpi / 72, grayscale=True).to_pil()
            for index in range(len(document))
        ]
    finally:
        document.close()
    first, *rest = images
    first.save(path, "PDF", resolution=float(dpi), save_all=True, append_images=rest)
    return len(images)


def scan_subset(beir: BeirSet, size: int) -> tuple[list[str], set[str]]:
    """(queries, documents): whole queries' relevant documents, fewest first, until `size`."""
    chosen: set[str] = set()
    queries: list[str] = []
    for qid, judged in sorted(beir.qrels.items(), key=lambda kv: (len(kv[1]), kv[0])):
        relevant = {doc for doc, grade in judged.items() if grade > 0}
        if qid in beir.queries and relevant and len(chosen | relevant) <= size:
            chosen |= relevant
            queries.append(qid)
    return queries, chosen


def write_beir(
    root: Path,
    beir: BeirSet,
    queries: Iterable[str],
    doc_id: Callable[[str], str],
    corpus: Iterable[Source] = (),
) -> None:
    """A BEIR folder of `queries` and their qrels, documents named by `doc_id`; with the
    corpus rows given (plain text), a corpus.jsonl for `ragbus eval` to ingest."""
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    keep = list(queries)
    with (root / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for qid in keep:
            fh.write(json.dumps({"_id": qid, "text": beir.queries[qid]}) + "\n")
    with (root / "qrels" / "test.tsv").open("w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for qid in keep:
            for doc, grade in sorted(beir.qrels.get(qid, {}).items()):
                fh.write(f"{qid}\t{doc_id(doc)}\t{grade}\n")
    with (root / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for source in corpus:
            row = {"_id": doc_id(source.id), "title": source.title, "text": source.text}
            fh.write(json.dumps(row) + "\n")


def pages_in(folder: Path) -> int:
    """The pages of every PDF in `folder`."""
    import pypdfium2 as pdfium

    count = 0
    for pdf in folder.glob("*.pdf"):
        document = pdfium.PdfDocument(str(pdf))
        count += len(document)
        document.close()
    return count


def build(
    beir_dir: Path,
    work: Path,
    scan_docs: int = 500,
    limit: int | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Render the files and write the BEIR folders under `work`; what was made."""
    beir = load_beir(beir_dir)
    sources = list(read_corpus(beir.corpus_path))[:limit]
    present = {source.id for source in sources}
    queries, subset = scan_subset(beir, scan_docs)
    subset &= present
    text_dir, scan_dir = work / "text-pdf", work / "scan-pdf"
    text_dir.mkdir(parents=True, exist_ok=True)
    scan_dir.mkdir(parents=True, exist_ok=True)
    for done, source in enumerate(sources, start=1):
        pdf = text_dir / file_name(source.id)
        if not pdf.exists():
            render_pdf(source, pdf)
        if source.id in subset:
            scan = scan_dir / file_name(source.id)
            if not scan.exists():
                render_scan(pdf, scan)
        if progress is not None:
            progress("render", done, len(sources))
    all_queries = [qid for qid in sorted(beir.qrels) if qid in beir.queries]
    kept = [source for source in sources if source.id in subset]
    write_beir(work / "beir-text", beir, all_queries, str, sources)
    write_beir(work / "beir-text-pdf", beir, all_queries, lambda d: file_name(d))
    write_beir(work / "beir-subset", beir, queries, str, kept)
    write_beir(work / "beir-scan-pdf", beir, queries, lambda d: file_name(d))
    made = {
        "documents": len(sources),
        "text_pdf_pages": pages_in(text_dir),
        "scan_documents": len(kept),
        "scan_pages": pages_in(scan_dir),
        "scan_queries": len(queries),
        "scan_dpi": SCAN_DPI,
    }
    (work / "made.json").write_text(json.dumps(made, indent=2))
    return made


def words(text: str) -> Counter[str]:
    return Counter(_WORD.findall(text.lower()))


def word_recall(source: str, extracted: str) -> tuple[int, int]:
    """(source words found in the extraction, source words), as multisets."""
    want, got = words(source), words(extracted)
    return sum(min(count, got[word]) for word, count in want.items()), sum(want.values())


def fidelity(
    beir_dir: Path,
    folder: Path,
    limit: int | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Parse every PDF of `folder` in this process, as the parse worker's child does; word
    recall against the BEIR corpus's text, and pages a minute."""
    from infra.documents import ParseLimits, ParseRefused, parse_bytes

    by_id = {source.id: source for source in read_corpus(load_beir(beir_dir).corpus_path)}
    files = sorted(folder.glob("*.pdf"))[:limit]
    limits = ParseLimits()
    found = total = pages = ocr_pages = 0
    refused: list[str] = []
    worst: list[tuple[float, str]] = []
    seconds = 0.0
    for done, path in enumerate(files, start=1):
        source = by_id[path.stem]
        data = path.read_bytes()
        started = time.perf_counter()
        try:
            parsed = parse_bytes(data, path.name, limits)
        except ParseRefused as exc:
            refused.append(f"{path.name}: {exc}")
            continue
        finally:
            seconds += time.perf_counter() - started
        hit, want = word_recall(source.words, f"{parsed.title}\n{parsed.text}")
        found, total = found + hit, total + want
        pages += max(1, len(parsed.pages))
        ocr_pages += parsed.ocr_pages
        worst.append((hit / max(want, 1), path.stem))
        if progress is not None:
            progress(folder.name, done, len(files))
    worst.sort()
    return {
        "files": len(files),
        "pages": pages,
        "ocr_pages": ocr_pages,
        "refused": refused,
        "word_recall": round(found / max(total, 1), 4),
        "worst_documents": [{"id": doc, "word_recall": round(r, 4)} for r, doc in worst[:5]],
        "parse_seconds": round(seconds, 2),
        "pages_per_minute": round(60 * pages / seconds, 1) if seconds else None,
    }
