"""The benchmark tables of the README and `docs/benchmarks.md`, read from `results/*.json`.

Each row is the latest run of one benchmark: its figures (`bench.figures`), the date and
machine of the run and the command that made it (the report's `run` block, `bench.provenance`).
Beside them `docs/evaluation.md` shows the retrieval channels of each evaluated data set, and
the fused ranking's difference from plain vector+sparse RRF. `ragbus tables` rewrites the
tables between their markers; a unit test fails when a table and its reports disagree, so no
figure is typed by hand. History lives in git, not in rows.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.figures import ROWS, Report, signed

README_MARKERS = ("<!-- benchmarks:begin -->", "<!-- benchmarks:end -->")
DOCS_MARKERS = ("<!-- latest-runs:begin -->", "<!-- latest-runs:end -->")
CHANNEL_MARKERS = ("<!-- channels:begin -->", "<!-- channels:end -->")

EVALUATIONS = (
    ("MuSiQue train-100", "eval-musique.json"),
    ("NFCorpus test", "eval-nfcorpus.json"),
    ("Cranfield", "eval-cranfield.json"),
)
"""The `ragbus eval` reports whose channels are shown side by side."""
CHANNEL_COLUMNS = ("vector", "sparse", "graph_local", "graph_global")
EVAL_METRICS = (
    ("nDCG@10", "ndcg@10"),
    ("Recall@10", "recall@10"),
    ("Complete@10", "complete@10"),
    ("MRR@10", "mrr@10"),
)


def _run_of(report: Report) -> tuple[str, str]:
    """The report's run as the tables show it: "date, machine", and the command."""
    run = report.get("run") or {}
    when = f"{run.get('date', 'undated')}, {run.get('machine', 'machine not recorded')}"
    return when, run.get("command", "not recorded")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(results: Path) -> str:
    """The latest run of each benchmark whose report is in `results`, as a Markdown table."""
    lines = [
        "| what | figures | run | command |",
        "|---|---|---|---|",
    ]
    for row in ROWS:
        path = results / row.report
        if not path.exists():
            continue
        report = json.loads(path.read_text(encoding="utf-8"))
        when, command = _run_of(report)
        lines.append(
            f"| {row.what} | {_cell(row.figure(report))} "
            f"([`results/{row.report}`](../results/{row.report})) | {_cell(when)} "
            f"| `{_cell(command)}` |"
        )
    return "\n".join(lines)


def channel_table(results: Path) -> str:
    """Each evaluated data set's metrics for the fused ranking, every channel alone and the
    plain vector+sparse RRF, side by side; the best of a row in bold; each set's run below."""
    head = ["data set, metric", "fused", *(c.replace("_", " ") for c in CHANNEL_COLUMNS)]
    lines = ["| " + " | ".join([*head, "vector+sparse RRF"]) + " |", "|---" * (len(head) + 1) + "|"]
    runs = []
    for name, report_file in EVALUATIONS:
        path = results / report_file
        if not path.exists():
            continue
        report = json.loads(path.read_text(encoding="utf-8"))
        columns = [
            report["fused"],
            *(report["channels"].get(c, {}) for c in CHANNEL_COLUMNS),
            report.get("baselines", {}).get("vector+sparse", {}),
        ]
        for label, key in EVAL_METRICS:
            values = [column.get(key) for column in columns]
            if values[0] is None:
                continue
            best = max(v for v in values if v is not None)
            cells = [
                "—" if v is None else (f"**{v:.3f}**" if v == best else f"{v:.3f}") for v in values
            ]
            lines.append(f"| {name}, {label} | " + " | ".join(cells) + " |")
        when, command = _run_of(report)
        runs.append(
            f"{name}: {report['queries']} queries, {when}, `{command}` "
            f"([`results/{report_file}`](../results/{report_file}))"
        )
    return "\n".join([*lines, "", *(f"- {line}" for line in runs), *_differences_table(results)])


def _differences_table(results: Path) -> list[str]:
    """The fused ranking against plain vector+sparse RRF, query by query, for each report
    that holds the comparison (`fused_against`): the mean difference, its 95% interval, the
    paired t-test's p and how many queries moved each way."""
    lines = [
        "",
        "| data set, metric | fused − vector+sparse RRF | 95% interval | p "
        "| queries better / worse |",
        "|---|---:|---|---:|---|",
    ]
    for name, report_file in EVALUATIONS:
        path = results / report_file
        if not path.exists():
            continue
        against = json.loads(path.read_text(encoding="utf-8")).get("fused_against", {})
        for label, key in EVAL_METRICS:
            if (d := against.get("vector+sparse", {}).get(key)) is None:
                continue
            low, high = d["ci95"]
            lines.append(
                f"| {name}, {label} | {signed(d['difference'])} | "
                f"{signed(low)} to {signed(high)} | {d['p']:.3f} | "
                f"{d['better']} / {d['worse']} of {d['queries']} |"
            )
    return lines if len(lines) > 3 else []


def replaced(text: str, markers: tuple[str, str], body: str) -> str:
    """`text` with what lies between `markers` replaced by `body`."""
    begin, end = markers
    head, found, rest = text.partition(begin)
    _, found_end, tail = rest.partition(end)
    if not found or not found_end:
        raise ValueError(f"markers {begin} … {end} not found")
    return f"{head}{begin}\n{body}\n{end}{tail}"


def rendered(root: Path) -> dict[Path, str]:
    """The README, the benchmarks page and the evaluation page as they should read, by path."""
    body = table(root / "results")
    readme, docs = root / "README.md", root / "docs" / "benchmarks.md"
    evaluation = root / "docs" / "evaluation.md"
    return {
        evaluation: replaced(
            evaluation.read_text(encoding="utf-8"), CHANNEL_MARKERS, channel_table(root / "results")
        ),
        readme: replaced(
            readme.read_text(encoding="utf-8"),
            README_MARKERS,
            body.replace("](../results/", "](results/"),
        ),
        docs: replaced(docs.read_text(encoding="utf-8"), DOCS_MARKERS, body),
    }
