"""Each benchmark's figures as its row of the benchmark tables says them (`bench.tables`).

`ROWS` is the tables' rows in order: what each measured, the report under `results/` that
holds its latest run, and the function that reads that report's numbers into the row's
sentence. A report's shape belongs to its benchmark; when it changes, its sentence changes
here, beside the others.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.cpu import STORES_PROCESS, python_cpu_ms

Report = dict[str, Any]


def _n(value: float, digits: int = 1) -> str:
    return f"{value:,.{digits}f}"


def _ms(value: float) -> str:
    return f"{value:,.0f} ms" if value >= 100 else f"{value:.1f} ms"


def signed(value: float) -> str:
    """A difference with its sign, and a true minus."""
    return f"{value:+.3f}".replace("-", "−")


def _whole_stack(r: Report) -> str:
    cpu = r["cpu"]["server_cpu_ms_per_request"]
    text = (
        f"namespace `{r.get('namespace', 'default')}`: {_n(r['throughput_qps'])} q/s, "
        f"p95 {_ms(r['latency_ms']['p95'])}, {_ms(cpu)} CPU a request"
    )
    peers = []
    if r.get("vs_same_work_peer"):
        peers.append(f"{r['vs_same_work_peer']['qps_ratio']:.2f}× the same-work peer's q/s")
    if r.get("vs_peer"):
        peers.append(f"{r['vs_peer']['qps_ratio']:.3f}× the retrieval-only peer's")
    return "; ".join([text, *peers])


def _bus(r: Report) -> str:
    ragbus = python_cpu_ms(r["cpu"]["process_cpu_ms_per_request"])
    text = (
        f"{_n(r['throughput_qps'])} q/s, {_ms(ragbus)} Python CPU a request, "
        f"{r['messages_per_request']:g} messages and {r['bytes_per_request'] / 1000:.0f} KB "
        f"a request, c = 1 p50 {_ms(r['one_at_a_time']['latency_ms']['p50'])}"
    )
    ratio = r.get("ratio_to_floor")
    if ratio:
        floor_cpu = ratio["python_cpu_ms_per_request"]["floor"]
        text += f"; {ratio['cpu_per_request']:.1f}× its floor's {_ms(floor_cpu)}"
    return text


def _scale(r: Report) -> str:
    sizes = r["sizes"]
    first, last = sizes[0], sizes[-1]
    if "cpu" not in last or "server_cores_busy" not in (last["cpu"] or {}):
        ratio = last["latency_ms"]["p95"] / first["latency_ms"]["p95"]
        return (
            f"end-to-end p95 at {last['size']} chunks = {ratio:.2f}× its p95 at "
            f"{first['size']}; {_n(last['throughput_qps'])} q/s at the largest"
        )
    ratios = [
        (
            row["size"],
            row["throughput_qps"] / first["throughput_qps"],
            row["latency_ms"]["p95"] / first["latency_ms"]["p95"],
        )
        for row in sizes[1:]
    ]
    size, qps, p95 = ratios[0]
    text = (
        f"{size}: {qps:.2f}× the q/s and {p95:.2f}× the p95 of {first['size']} "
        f"({_n(first['throughput_qps'])} q/s, {_ms(first['latency_ms']['p95'])})"
    )
    text += "".join(f"; {size}: {qps:.2f}× and {p95:.2f}×" for size, qps, p95 in ratios[1:])
    stores_cpu = last["cpu"]["process_cpu_ms_per_request"].get(STORES_PROCESS)
    memory = ((last.get("memory_mb") or {}).get("processes") or {}).get(STORES_PROCESS) or {}
    text += f"; at {last['size']} the stores' process {_ms(stores_cpu)} of CPU a request"
    if memory.get("rss"):
        text += f" and {memory['rss'] / 1024:.1f} GB"
    cores = last["cpu"]["server_cores_busy"]
    return text + f", {cores:.2f} of {last['cpu'].get('cores', 2)} cores busy"


def _ingest(r: Report) -> str:
    text = (
        f"{r['documents']:,} documents, {r['chunks']:,} chunks in {r['seconds']:,.0f} s: "
        f"{r['chunks_per_minute']:,.0f} chunks/min"
    )
    alone = r.get("encoder_alone")
    if alone:
        text += (
            f"; the encoder alone {alone['chunks_per_minute']:,.0f} chunks/min over the same "
            f"chunks, ratio {r['ratio_to_encoder']:.2f}"
        )
    return text


def _documents(r: Report) -> str:
    text, scans = r["text_layer"], r["scans"]
    parts = [
        f"PDFs with a text layer: {text['pages']:,} pages, word recall {text['word_recall']:.4f}, "
        f"{text['pages_per_minute']:,.0f} pages/min parsed",
        f"scans: {scans['pages']:,} pages by OCR, word recall {scans['word_recall']:.4f}, "
        f"{scans['pages_per_minute']:,.0f} pages/min",
    ]
    found = r.get("retrieval")
    if found:
        pdf, scan = found["text_pdf"], found["scan_pdf"]
        parts.append(
            f"nDCG@10 from the PDFs {pdf['ndcg@10']:.4f} against "
            f"{found['text']['ndcg@10']:.4f} from the text ({signed(pdf['delta'])}); "
            f"from the scans {scan['ndcg@10']:.4f} against "
            f"{found['subset_text']['ndcg@10']:.4f} ({signed(scan['delta'])}, "
            f"{r['made']['scan_queries']} queries on {r['made']['scan_documents']} documents); "
            f"through the bus {pdf['ingest']['pages_per_minute']:,.0f} and "
            f"{scan['ingest']['pages_per_minute']:,.0f} pages/min ingested"
        )
    return "; ".join(parts)


def _during_ingest(r: Report) -> str:
    busy = ", ".join(f"{round_['p95_ms']:.0f}" for round_ in r["busy"])
    idle = ", ".join(f"{round_['p95_ms']:.0f}" for round_ in r["idle"])
    verdict = "met" if r["met"] else "missed"
    return (
        f"p95 {_ms(r['busy_p95_ms'])} while the files are ingested ({busy} ms, "
        f"{r['rounds']} rounds of {r['duration_s']:g} s, c = {r['concurrency']}) against "
        f"{_ms(r['idle_p95_ms'])} idle ({idle}): {r['ratio']:.2f}×, worst round "
        f"{r['worst_round_ratio']:.2f}×, {r['errors']} errors (goal {r['goal_ratio']:g}×: "
        f"{verdict}); the ingest took {r['ingest_seconds']:,.0f} s"
    )


def _encoder_devices(r: Report) -> str:
    configs = r["configurations"]
    first = next(iter(configs))
    parts = []
    for name, c in configs.items():
        text = (
            f"{name} ({c['runtime']}, {c['precision']}): {c['ingest']['chunks_per_min']:,} "
            f"chunks/min, query p50 {c['query_ms']['p50']:.1f} ms"
        )
        same = c.get(f"vs_{first}")
        if same:
            text += (
                f", {c['ingest'][f'vs_{first}']:.1f}× {first}, chunk cosine ≥ "
                f"{same['chunk_cosine']['min']:.5f}"
            )
        parts.append(text)
    return f"{r['chunks']:,} chunks of {r['documents']:,} documents; " + "; ".join(parts)


def _scaleout(r: Report) -> str:
    runs = "; ".join(
        f"{run['processes_per_stateless_role']} a role: {_n(run['throughput_qps'])} q/s, "
        f"p95 {_ms(run['latency_ms']['p95'])}, {_n(run['cpu_ms_per_request'], 0)} ms CPU a request"
        for run in r["runs"]
    )
    cluster = f"{r['nats_nodes']} NATS node(s), streams R{r['stream_replicas']}"
    return f"{cluster}, c = {r['concurrency']}: {runs}"


def _share(fraction: float) -> str:
    """A share as a percentage, never rounded up to 100 %."""
    return "100 %" if fraction >= 1 else f"{min(99.9, 100 * fraction):.1f} %"


def _chaos(r: Report) -> str:
    requests, ingest = r["requests"], r.get("ingest") or {}
    dups = sum(r["duplicates"].values())
    redis = r.get("redis") or {}
    redis_kills = (
        f"{redis['primary_kills']} Redis primary kills (failed over in "
        f"{max(redis['failover_s'], default=0):.1f} s at most)"
        if redis.get("sentinel")
        else "redis-server"
    )
    servers = (
        f"{sum(r['nats_node_kills'].values())} NATS node kills of {r['nats_nodes']} + {redis_kills}"
        if r.get("nats_nodes", 1) > 1
        else f"nats-server + {redis_kills}"
    )
    text = (
        f"{r['duration_s']:.0f} s, {r['kills']} kills + {servers}: "
        f"{requests['submitted']:,} requests, {_share(requests['terminal_share'])} terminal, "
        f"{_share(requests['completed_share'] or 0)} completed, {dups} duplicates, "
        f"{r['sse_events_missed']} events missed"
    )
    if "sse_events_after_done" in r:
        text += f", {r['sse_events_after_done']} after a done"
    if "dead_letters" in r:
        text += f", {r['dead_letters']} dead letters"
    if ingest:
        done = ingest["documents_done"] + ingest["documents_unchanged"]
        text += f", {done} of {ingest['documents']} documents"
    if redis.get("sentinel"):
        text += (
            f"; {redis['idempotency_keys_lost']} of {redis['idempotency_keys_checked']:,} "
            f"idempotency keys lost, {redis['sessions_lost_turns']} of "
            f"{redis['sessions_checked']} sessions missing a turn, quota over-granted by "
            f"{redis['quota_over_granted']}"
        )
    return text


def _retrieval(r: Report) -> str:
    fused, pair = r["fused"], r.get("baselines", {}).get("vector+sparse")
    shown = [("nDCG@10", "ndcg@10"), ("Recall@10", "recall@10"), ("Complete@10", "complete@10")]
    shown = [(label, key) for label, key in shown if key in fused]
    text = ", ".join(f"{label} {fused[key]:.3f}" for label, key in shown)
    if pair:
        text += " (vector+sparse RRF " + ", ".join(f"{pair[key]:.3f}" for _, key in shown) + ")"
    if d := r.get("fused_against", {}).get("vector+sparse", {}).get("ndcg@10"):
        low, high = d["ci95"]
        text += (
            f"; nDCG@10 against it {signed(d['difference'])}, 95% interval {signed(low)} "
            f"to {signed(high)}"
        )
    return f"{text}; {r['queries']} queries"


def _intent(r: Report) -> str:
    return f"{r['n']} held-out queries: accuracy {r['accuracy']:.3f}, macro-F1 {r['macro_f1']:.3f}"


def _intent_real(r: Report) -> str:
    labelled = [name for name, c in r["per_class"].items() if c["support"]]
    text = (
        f"{r['n']:,} real questions it was not trained on: accuracy {r['accuracy']:.3f}, "
        f"macro-F1 over their {len(labelled)} intents {r['macro_f1_labelled']:.3f}"
    )
    if bounds := r.get("intervals", {}).get("macro_f1_labelled"):
        text += f" (95% interval {bounds[0]:.3f} to {bounds[1]:.3f})"
    return text


def _intent_folds(r: Report) -> str:
    last = r["curve"][-1]
    weakest = min(last["f1"], key=last["f1"].get)
    splits = "train and valid" if r.get("split") == "all" else "train"
    return (
        f"{r['folds']}-fold cross-validation over NF-CATS {splits} "
        f"({r['real_rows']:,} real questions) beside the bundled rows: out-of-fold macro-F1 "
        f"over their {len(last['f1'])} intents {last['macro_f1']:.3f}; the weakest, "
        f"{weakest}, {last['f1'][weakest]:.2f}"
    )


def _intent_keywords(r: Report) -> str:
    return (
        f"{r['n']:,} NFCorpus topic queries (dev split), all factual: "
        f"{r['accuracy']:.3f} routed factual"
    )


def _intent_questions(r: Report) -> str:
    return (
        f"{r['n']:,} MuSiQue multi-hop questions, all factual: {r['accuracy']:.3f} routed factual"
    )


def _intent_web(r: Report) -> str:
    forms = r.get("by_form", {})
    shown = ", ".join(
        f"{name} {form['accuracy']:.3f} (n = {form['n']})" for name, form in sorted(forms.items())
    )
    factual = r["per_class"]["factual"]["support"]
    return (
        f"{r['n']:,} real web queries (TREC DL, DL-HARD's annotations), {factual} of them "
        f"factual, none trained on: accuracy {r['accuracy']:.3f}; by form: {shown}"
    )


def _conversations(r: Report) -> str:
    return (
        f"{r['follow_ups']} follow-ups, Recall@10 as typed "
        f"{r['without_memory']['recall@10']:.3f} → in their session "
        f"{r['with_memory']['recall@10']:.3f}"
    )


def _research(r: Report) -> str:
    normal, research = r["answer"], r["research"]
    return (
        f"{normal['questions']} questions, reference answer found "
        f"{normal['answer_found']:.2f} → {research['answer_found']:.2f} in research mode"
    )


def _doors(r: Report) -> str:
    parts = []
    for door, name in (("openai", "OpenAI's chat"), ("mcp", "MCP's `ask`")):
        versus = r["vs_chat"].get(door)
        if versus:
            parts.append(
                f"{name} {versus['throughput_ratio']:.2f}× `/v1/chat`'s q/s, p95 "
                f"{versus['p95_added_ms']:+.0f} ms".replace("-", "−")
            )
    text = "; ".join(parts)
    added = (r.get("tool_calls") or {}).get("mcp_added")
    if added and added.get("tool_step_p50_ms") is not None:
        text += (
            f"; a stdio MCP server's tool step +{added['tool_step_p50_ms']:.1f} ms p50, "
            f"+{added['tool_step_p95_ms']:.1f} ms p95 over the calculator's"
        )
    return text


def _filters(r: Report) -> str:
    shares = r["kept_share"]
    return (
        f"{r['filters']:,} random filters on {r['chunks']:,} chunks ({r['documents']:,} "
        f"documents), c = {r['concurrency']}: {r['requests_with_passages_outside']} requests "
        f"with a passage outside the filter, of {r['passages_checked']:,} fused and "
        f"{r['channel_passages_checked']:,} channel passages; {r['requests_short_of_top_k']} "
        f"short of top_k {r['top_k']} where enough passed; the filters kept a median "
        f"{shares['median']:.1%} of the documents"
    )


def _filter_cost(r: Report) -> str:
    versus = r["vs_unfiltered"]
    text = (
        f"`{json.dumps(r['filter'])}` in namespace `{r.get('namespace', 'default')}`: p95 "
        f"{versus['p95_ratio']:.2f}×, q/s {versus['throughput_ratio']:.2f}× the unfiltered "
        f"load's (median of {len(versus['rounds'])} alternated rounds); filtered "
        f"{_n(r['throughput_qps'])} q/s, p95 {_ms(r['latency_ms']['p95'])}"
    )
    if r.get("vs_same_work_peer"):
        text += f"; {r['vs_same_work_peer']['qps_ratio']:.2f}× the same-work peer's q/s, filtered"
    return text


def _user_cost(r: Report) -> str:
    final = r["query_user_vs_tenant_key"]["final"]
    ratio, user = final["ratio_user_to_tenant"], final["mean"]["user"]
    tenant_key = r["query_tenant_key"]["ratio_new_to_base"]
    return (
        f"a user who may read every document, against the tenant's key: q/s "
        f"{ratio['throughput_qps']:.2f}×, p95 {ratio['p95_ms']:.2f}×, CPU a request "
        f"{ratio['server_cpu_ms_per_request']:.2f}× (mean of 3 alternated rounds; the user "
        f"{_n(user['throughput_qps'])} q/s, p95 {_ms(user['p95_ms'])}); the tenant key's load "
        f"against the main before users: q/s {tenant_key['throughput_qps']:.2f}×, p95 "
        f"{tenant_key['p95_ms']:.2f}×"
    )


@dataclass(frozen=True)
class Row:
    what: str
    report: str
    """The file under `results/`."""
    figure: Callable[[Report], str]


def _backup(r: Report) -> str:
    backup = r["backup"]
    parts = ", ".join(
        f"{name} {size / 1e6:,.1f} MB" for name, size in backup["by_part"].items() if size
    )
    return (
        f"`ragbus backup` in {backup['seconds']:.1f} s: {backup['bytes'] / 1e6:,.1f} MB long, "
        f"{backup['bytes_on_disk'] / 1e6:,.1f} MB on disk ({parts}); queries' p95 during "
        f"backups {r['busy_p95_ms']:.0f} ms against {r['idle_p95_ms']:.0f} ms idle, "
        f"{r['ratio']:.2f}× (worst round {r['worst_round_ratio']:.2f}×, goal 1.5×, c = "
        f"{r['concurrency']}); `ragbus restore` on a fresh machine in "
        f"{r['restore_seconds']:.1f} s, the first answer "
        f"{r['first_answer_after_up_seconds']:.1f} s after `ragbus up`"
    )


def _sync(r: Report) -> str:
    first, resync = r["first_sync"], r["resync_1pct"]
    watch, watched = r["watch"], f"({r['watch']['writes']} writes)"
    if "watch_after_fix" in r:  # measured again on the same stores once the stall was fixed
        watch = r["watch_after_fix"]
        watched = f"({watch['writes']} writes, measured again after the fix on the same stores)"
    orphans = ", ".join(f"{n} {name.replace('_', ' ')}" for name, n in r["orphans"].items())
    return (
        f"{r['files']:,} files (Markdown, text, HTML, Word): the first sync in "
        f"{first['seconds']:,.0f} s, {r['first_sync_speed_vs_ingest']:.2f}× the speed of "
        f"`ragbus ingest` on them ({r['ingest']['seconds']:,.0f} s); a re-sync with 1 % changed "
        f"in {resync['seconds']:.1f} s, {resync['fraction_of_first_sync']:.1%} of the first; "
        f"under `watch` a write searchable in p50 {watch['p50_s']:.2f} s, p95 "
        f"{watch['p95_s']:.2f} s {watched}; after "
        f"{r['deleted']['files']} deletions: {orphans}"
    )


ROWS = (
    Row("the whole stack, c = 8", "bench.json", _whole_stack),
    Row("the broker path alone (instant engines), c = 8", "bus.json", _bus),
    Row("the doors against `/v1/chat`, c = 8", "bench-doors.json", _doors),
    Row("metadata filters: every channel kept to the filter", "bench-filters.json", _filters),
    Row("a filter keeping 10 % of the documents, c = 8", "bench-filter-cost.json", _filter_cost),
    Row("a user's questions, c = 8", "bench-issue56-users.json", _user_cost),
    Row("scale, 10k → 1M chunks", "scale.json", _scale),
    Row("ingestion", "ingest.json", _ingest),
    Row("a folder source kept in sync", "bench-sync.json", _sync),
    Row(
        "the encoder on a GPU: ingestion's encoder work and a query",
        "encoder-devices-h200.json",
        _encoder_devices,
    ),
    Row("documents as files: PDFs and scans of NFCorpus", "bench-documents.json", _documents),
    Row(
        "queries during an ingest of scanned PDFs",
        "bench-during-ingest.json",
        _during_ingest,
    ),
    Row("chaos", "chaos.json", _chaos),
    Row("chaos, `make soak`'s ten minutes", "chaos-soak.json", _chaos),
    Row("chaos on a three-node NATS cluster, c = 8", "chaos-cluster.json", _chaos),
    Row("chaos with the Redis primary killed (Sentinel), c = 8", "chaos-sentinel.json", _chaos),
    Row("a backup while serving, and a restore", "bench-backup.json", _backup),
    Row("stateless roles scaled out on a NATS cluster", "scaleout.json", _scaleout),
    Row("the same on one NATS server", "scaleout-one-node.json", _scaleout),
    Row("retrieval, NFCorpus", "eval-nfcorpus.json", _retrieval),
    Row("retrieval, MuSiQue", "eval-musique.json", _retrieval),
    Row("retrieval, Cranfield (not tuned on)", "eval-cranfield.json", _retrieval),
    Row("intent", "intent.json", _intent),
    Row(
        "intent, the shipped model's real questions, out of fold",
        "intent-learning-curve-all.json",
        _intent_folds,
    ),
    Row(
        "intent, NF-CATS valid split (a model trained on NF-CATS train alone)",
        "intent-nfcats-valid-trained.json",
        _intent_real,
    ),
    Row(
        "intent, NF-CATS valid, the bundled rows alone",
        "intent-nfcats-valid-shipped.json",
        _intent_real,
    ),
    Row("intent, real keyword queries", "intent-keyword-topics.json", _intent_keywords),
    Row("intent, real factual questions", "intent-musique-questions.json", _intent_questions),
    Row("intent, real web queries", "intent-dl-hard.json", _intent_web),
    Row("conversations", "conversations.json", _conversations),
    Row("research mode", "research.json", _research),
)
