"""`ragbus ingest DIR` on a folder of good and broken files, through a real stack (issue 54):
each file skipped is named with its reason before anything is published (an empty file, a
link out of the folder), each document that failed is named with its reason once the job
ends, and the exit status (3) tells a script that not everything was indexed."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from infra.runtime.ingest_jobs import read_job
from launcher.runtime import Runtime
from tests.environment import stack_environment
from tests.integration.test_files_ingest import (
    HTML,
    ROOT,
    docx_bytes,
    namespace,
    pdf_bytes,
)

DATA = ROOT / "tests" / "data" / "documents"
SECRET = "The operator's seed: SUAM-NOT-FOR-THE-INDEX"
SOME_FAILED = 3


def broken_folder(root: Path, outside: Path) -> None:
    """5 good files, 6 broken ones, a link out of the folder and one inside it."""
    root.mkdir(parents=True)
    report = pdf_bytes("The Orla dam was finished in 1931 and raised twice since.")
    (root / "report.pdf").write_bytes(report)
    (root / "minutes.docx").write_bytes(
        docx_bytes("Harbour board", "The board approved a second breakwater.")
    )
    (root / "lighthouse.html").write_bytes(HTML)
    (root / "summary.md").write_text("# Summary\n\nThe ferry ran every hour in summer.")
    (root / "notes" / "log.txt").parent.mkdir()
    (root / "notes" / "log.txt").write_text("The keeper logged fog on forty days.")
    # broken
    (root / "empty.pdf").write_bytes(b"")
    (root / "truncated.pdf").write_bytes(report[: len(report) // 3])
    (root / "noise.pdf").write_bytes(os.urandom(4096))
    (root / "locked.pdf").write_bytes((DATA / "libreoffice-writer-password.pdf").read_bytes())
    (root / "fake.docx").write_bytes(b"PK\x03\x04 not really a Word file")
    (root / "scripts.html").write_bytes(
        b"<!doctype html><html><head><script>var a = 1;</script></head>"
        b"<body><script>document.title = 'x';</script></body></html>"
    )
    # links
    outside.mkdir()
    (outside / "seed.txt").write_text(SECRET)
    (root / "seed.txt").symlink_to(outside / "seed.txt")
    (root / "latest.pdf").symlink_to(root / "report.pdf")


async def test_ingest_names_each_failed_or_skipped_file_and_exits_3(
    stack: Runtime, tmp_path: Path
) -> None:
    root = tmp_path / "batch"
    broken_folder(root, tmp_path / "trust")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli",
        "ingest",
        str(root),
        "--namespace",
        namespace(),
        "--timeout",
        "180",
        cwd=ROOT,
        env=stack_environment(stack.settings),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 240)
    out, err = stdout.decode(), stderr.decode()
    print(out, err)
    assert process.returncode == SOME_FAILED, (out, err)
    lines = out.splitlines()

    # skipped, said before the job is published
    told = lines.index("skipped 2 files:")
    assert lines[told + 1 : told + 5] == [
        "  empty.pdf: empty",
        f"  seed.txt: a link to a file outside the folder ({tmp_path / 'trust' / 'seed.txt'}): "
        "not followed",
        "not followed 1 link (read under their own paths):",
        "  latest.pdf: a link to report.pdf, read under its own path",
    ]
    published = next(i for i, line in enumerate(lines) if line.startswith("job "))
    assert told < published
    assert "10 documents published (8 files to parse)" in lines[published]

    # failed, each with its reason, after the counts
    assert "documents: 5 done, 0 unchanged, 5 failed" in out, out
    failed = lines.index("failed 5 documents:")
    reasons = dict(line.strip().split(": ", 1) for line in lines[failed + 1 : failed + 6])
    assert sorted(reasons) == [
        "fake.docx",
        "locked.pdf",
        "noise.pdf",
        "scripts.html",
        "truncated.pdf",
    ], out
    assert "encrypted" in reasons["locked.pdf"]
    assert "no text" in reasons["scripts.html"]
    assert all(reason for reason in reasons.values())

    # one sentence on stderr for the script's log
    job_id = lines[published].split()[1].rstrip(":")
    assert err.strip().splitlines()[-1] == (
        f"ragbus: job {job_id}: 5 of 10 documents failed and 2 files were skipped, each named "
        "above with its reason; the rest was indexed"
    )
    assert "Traceback" not in err
    assert stack.resources is not None
    job = await read_job(stack.resources.redis(), job_id)
    assert job is not None and job["expected"] == 10 and job["documents_done"] == 5
    assert "seed.txt" not in job["errors"], "never published"
