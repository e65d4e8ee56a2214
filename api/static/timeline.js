// The phase waterfall: one row per phase run (and per search channel and query), on one
// time axis shared by every attempt, like a trace view. Rows are keyed by attempt, phase,
// query and started_at: a worker's `in_progress` and its `completed`/`failed` carry the same
// started_at, so they are one row; a generation round after a tool call is another row.

import { clear, el, fmtMs, pct, short } from "./dom.js";

const STATUS_LABEL = {
  in_progress: "running",
  completed: "completed",
  failed: "failed",
  skipped: "skipped",
  dropped: "dropped",
  unfinished: "no end",
};
const SUMMARY_KEYS = [
  "intent", "confidence", "method", "count", "fused", "bridged", "generator", "fallback_from",
  "sentences", "citations", "tokens", "verdict", "strategy", "planner", "tool", "name", "ok",
  "from_attempt", "to_attempt", "invalid_citations", "citations_removed", "nli",
];

export class Timeline {
  constructor(root) {
    this.root = root;
    this.reset();
  }

  reset(question = null) {
    this.question = question;
    this.rows = new Map();
    this.order = 0;
    this.skew = 0;
    this.done = false;
    this.#stopTicking();
    this.scheduled = false;
    clear(this.root);
    this.root.append(el("p", { class: "empty", text: "Phases appear here as the workers report them." }));
  }

  /** A `phase` event (its envelope: attempt, data). */
  add(event) {
    const data = event.data || {};
    const meta = data.metadata || {};
    const attempt = Number(event.attempt) || 1;
    const started = data.started_at || event.occurred_at;
    // a finished phase's event is sent as it ends: its occurred_at is the end
    const end = data.ended_at || (data.status === "in_progress" ? null : event.occurred_at);
    // a research child's step is one row from its start to its end, whatever their stamps
    const child = meta.child_id ? [attempt, data.phase, meta.child_id].join("|") : null;
    const key = child || [attempt, data.phase, meta.channel || "", meta.query || "", started].join("|");
    // The server's clock, not this one, times a running row: its latest stamp, advanced by
    // the time passed here since it arrived (a skewed client clock then does not matter).
    const stamp = Date.parse(event.occurred_at || end || started);
    if (Number.isFinite(stamp)) this.skew = stamp - Date.now();
    const unfinished = this.rows.has(key) ? null : this.#runEndedBySaga(attempt, data, meta);
    if (unfinished) {
      const ended = Date.parse(end || started);
      unfinished.status = data.status;
      unfinished.meta = { ...unfinished.meta, ...meta };
      if (Number.isFinite(ended)) {
        unfinished.endedAt = ended;
        unfinished.durationMs = Math.max(0, ended - unfinished.startedAt);
      }
      this.schedule();
      return;
    }
    const row = this.rows.get(key) || { key, order: this.order++, attempt };
    const startedAt = child && Number.isFinite(row.startedAt) ? row.startedAt : Date.parse(started);
    const endedAt = end ? Date.parse(end) : null;
    Object.assign(row, {
      phase: data.phase,
      status: data.status,
      channel: meta.channel || null,
      query: meta.query || null,
      startedAt,
      endedAt,
      durationMs: child && endedAt !== null ? Math.max(0, endedAt - startedAt)
        : typeof data.duration_ms === "number" ? data.duration_ms : null,
      meta: { ...(row.meta || {}), ...meta },
    });
    this.rows.set(key, row);
    this.schedule();
  }

  /**
   * The orchestrator ends a step a worker never finished (its deadline passed: a channel
   * dropped, a classifier that did not answer) with an event of its own, stamped with its own
   * time. That event closes the worker's running row instead of adding a second one.
   */
  #runEndedBySaga(attempt, data, meta) {
    if (data.status !== "failed" || data.duration_ms) return null;
    for (const row of this.rows.values()) {
      if (
        row.attempt === attempt &&
        row.phase === data.phase &&
        row.status === "in_progress" &&
        (!meta.query || row.query === meta.query)
      ) {
        return row;
      }
    }
    return null;
  }

  /** The request ended: rows still running never got their end. */
  finish() {
    this.done = true;
    for (const row of this.rows.values()) {
      if (row.status === "in_progress") row.status = "unfinished";
    }
    this.#stopTicking();
    this.schedule();
  }

  /** The strategy an attempt was made with: its retry phase's, or the critic's before it. */
  strategyOf(attempt) {
    for (const row of this.rows.values()) {
      if (row.attempt === attempt && row.phase === "retry" && row.meta.strategy) return row.meta.strategy;
    }
    for (const row of this.rows.values()) {
      if (row.attempt === attempt - 1 && row.phase === "critic" && row.meta.strategy) return row.meta.strategy;
    }
    return null;
  }

  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    requestAnimationFrame(() => {
      this.scheduled = false;
      this.render();
    });
  }

  render() {
    const rows = [...this.rows.values()].filter((r) => Number.isFinite(r.startedAt));
    clear(this.root);
    if (!rows.length) {
      this.root.append(el("p", { class: "empty", text: "Phases appear here as the workers report them." }));
      return;
    }
    const now = Date.now() + this.skew;
    const endOf = (r) => {
      if (r.endedAt !== null && Number.isFinite(r.endedAt)) return r.endedAt;
      if (r.durationMs !== null) return r.startedAt + r.durationMs;
      return r.status === "in_progress" && !this.done ? now : r.startedAt;
    };
    const t0 = Math.min(...rows.map((r) => r.startedAt));
    const t1 = Math.max(...rows.map(endOf), t0 + 1);
    const span = t1 - t0;
    const running = rows.some((r) => r.status === "in_progress");

    this.root.append(axis(span));
    const attempts = [...new Set(rows.map((r) => r.attempt))].sort((a, b) => a - b);
    for (const attempt of attempts) {
      const own = rows
        .filter((r) => r.attempt === attempt)
        .sort((a, b) => a.startedAt - b.startedAt || a.order - b.order);
      const strategy = this.strategyOf(attempt);
      const heading = attempt === 1 && attempts.length === 1 ? null : el(
        "p",
        { class: "attempt-head", dataset: { attempt } },
        `Attempt ${attempt}`,
        strategy ? el("span", { class: "badge strategy", text: strategy }) : null,
      );
      const list = el("ol", { class: "rows", "aria-label": `Attempt ${attempt} phases` });
      for (const row of own) list.append(this.#row(row, t0, span, endOf(row)));
      this.root.append(el("div", { class: "attempt", dataset: { attempt } }, heading, list));
    }
    if (running && !this.done) this.#startTicking();
    else this.#stopTicking();
  }

  #row(row, t0, span, end) {
    const dropped = row.status === "failed" && row.meta.dropped;
    const status = dropped ? "dropped" : row.status;
    const reason = row.meta.reason || row.meta.error || null;
    const label = row.channel ? row.phase.replace(/_search$/, "") : row.phase;
    const measured = row.durationMs !== null ? row.durationMs : row.status === "in_progress" ? end - row.startedAt : null;

    const bar = el("span", { class: "bar", dataset: { status } });
    bar.style.left = pct((row.startedAt - t0) / span);
    bar.style.width = pct((end - row.startedAt) / span);
    const asked = row.query && row.query !== this.question ? `query: ${short(row.query, 120)}  ` : "";
    const details = asked + summary(row.meta);
    return el(
      "li",
      {
        class: "phase-row",
        "data-testid": "phase-row",
        dataset: { phase: row.phase, status, attempt: row.attempt, channel: row.channel },
        title: row.query ? `query: ${row.query}` : null,
      },
      el(
        "div",
        { class: "phase-label" },
        el("span", { class: "phase-name", text: label.replaceAll("_", " ") }),
        row.channel ? el("span", { class: "channel-tag", text: "search" }) : null,
        el("span", { class: `status s-${status}`, text: STATUS_LABEL[status] || status }),
        el("span", { class: "duration", text: measured === null ? "" : fmtMs(measured) }),
      ),
      el("div", { class: "track", "aria-hidden": "true" }, bar),
      reason || details
        ? el(
          "p",
          { class: "phase-meta" },
          reason ? el("span", { class: "reason", text: `reason: ${short(reason, 200)}` }) : null,
          details ? el("span", { class: "details", text: details }) : null,
        )
        : null,
    );
  }

  #startTicking() {
    if (this.ticker) return;
    this.ticker = setInterval(() => this.schedule(), 250);
  }

  #stopTicking() {
    if (this.ticker) clearInterval(this.ticker);
    this.ticker = null;
  }
}

function summary(meta) {
  const parts = [];
  for (const key of SUMMARY_KEYS) {
    if (!(key in meta) || meta[key] === null || meta[key] === undefined) continue;
    parts.push(`${key}=${short(meta[key], 40)}`);
  }
  if (meta.scores && typeof meta.scores === "object") {
    parts.push(Object.entries(meta.scores).map(([k, v]) => `${k}=${short(v, 8)}`).join(" "));
  }
  if (Array.isArray(meta.search_queries) && meta.search_queries.length) {
    parts.push(`queries: ${meta.search_queries.map((q) => short(q, 60)).join(" | ")}`);
  }
  return parts.join("  ");
}

function axis(span) {
  const ticks = el("div", { class: "axis", "aria-hidden": "true" });
  for (const f of [0, 0.25, 0.5, 0.75, 1]) {
    const tick = el("span", { class: "tick", text: fmtMs(span * f) });
    tick.style.left = pct(f);
    ticks.append(tick);
  }
  return el("div", { class: "axis-row" }, el("div", { class: "axis-label", text: "time since the first phase" }), ticks);
}
