// The answer: streamed tokens, then the final content with its [n] markers as buttons that
// open the cited source's card, and beside it how the answer was made (intent, confidence,
// weights, the critic, the attempts, the trace id). Every value from the API is text.

import { append, clear, el, fmtMs, fmtNum, pct, short } from "./dom.js";

const INLINE = /\[(\d{1,3})\]|\*\*([^*\n]+?)\*\*|\*([^*\s\n][^*\n]*?)\*|`([^`\n]+)`/g;
const CHANNELS = ["vector", "sparse", "graph_local", "graph_global"];

export class AnswerView {
  constructor({ answer, note, sources, facts }) {
    this.answerEl = answer;
    this.noteEl = note;
    this.sourcesEl = sources;
    this.factsEl = facts;
    this.reset();
  }

  reset() {
    this.streamed = "";
    this.tokenIndexes = [];
    this.draftAttempt = 0;
    this.final = null;
    this.traceId = null;
    clear(this.answerEl);
    this.answerEl.dataset.state = "empty";
    this.answerEl.dataset.tokens = "0";
    this.noteEl.hidden = true;
    clear(this.noteEl);
    clear(this.sourcesEl);
    clear(this.factsEl).append(el("p", { class: "empty", text: "Details appear with the answer." }));
  }

  /**
   * A `token` event: its text joins the draft as it streams. Indexes count from 0 for each
   * generation step, so a 0 after text (a retry's new attempt, a round after a tool call)
   * starts a new draft rather than adding to the old one.
   */
  token(data, attempt = 1) {
    if (this.final) return;
    const index = Number(data.index) || 0;
    const restart = this.streamed && (index === 0 || attempt !== this.draftAttempt);
    if (restart || this.answerEl.dataset.state !== "streaming") {
      this.streamed = "";
      clear(this.answerEl);
      this.draftLabel = el("p", { class: "muted draft-label", hidden: attempt <= 1 });
      this.draftEl = el("p", { class: "draft" });
      this.answerEl.append(this.draftLabel, this.draftEl);
      this.answerEl.dataset.state = "streaming";
    }
    this.draftAttempt = attempt;
    this.draftLabel.textContent = `draft of attempt ${attempt}`;
    this.draftLabel.hidden = attempt <= 1;
    this.streamed += String(data.text ?? "");
    this.tokenIndexes.push(index);
    this.draftEl.textContent = this.streamed;
    this.answerEl.dataset.tokens = String(this.tokenIndexes.length);
  }

  /** The `answer` event's data: render it whole, with its sources and its facts. */
  answer(data) {
    this.final = data;
    const content = String(data.content ?? "");
    const citations = data.citations || {};
    const meta = data.metadata || {};
    clear(this.answerEl);
    if (content.trim()) {
      append(this.answerEl, renderContent(content, citations, (n) => this.openSource(n)));
    } else if (meta.retrieval) {
      this.answerEl.append(el("p", { class: "muted", text: "Retrieval only: the fused ranking, with each channel's rank." }));
      this.answerEl.append(retrievalTable(meta.retrieval));
    } else {
      this.answerEl.append(el("p", { class: "muted", text: "The answer is empty." }));
    }
    this.answerEl.dataset.state = "final";
    const note = meta.note || meta.critic_note;
    this.noteEl.hidden = !note;
    this.noteEl.textContent = note ? String(note) : "";
    this.#sources(content, citations, meta);
    if (meta.trace_id) this.traceId = meta.trace_id;
    this.#facts(meta);
  }

  /** An `error` event's data. */
  error(data) {
    const box = el(
      "p",
      { class: "error-box", "data-testid": "answer-error" },
      el("strong", { text: `${data.code || "error"}: ` }),
      String(data.message || "the request failed"),
      data.phase ? ` (phase ${data.phase})` : "",
    );
    if (this.answerEl.dataset.state === "empty") clear(this.answerEl);
    this.answerEl.append(box);
    if (this.answerEl.dataset.state !== "final") this.answerEl.dataset.state = "error";
  }

  /** The request ended without an answer: say so rather than leave a blank. */
  ended(status) {
    if (this.final || this.answerEl.dataset.state === "error") return;
    const text = status === "completed" ? "The request completed without an answer." : `The request ended: ${status}.`;
    if (this.answerEl.dataset.state === "empty") clear(this.answerEl);
    this.answerEl.append(el("p", { class: "muted", text }));
  }

  setTrace(traceId) {
    if (!traceId || traceId === this.traceId) return;
    this.traceId = traceId;
    const slot = this.factsEl.querySelector("[data-testid=trace-id]");
    if (slot) slot.textContent = traceId;
    else if (this.final) this.#facts(this.final.metadata || {});
  }

  openSource(n) {
    const card = this.sourcesEl.querySelector(`[data-n="${CSS.escape(String(n))}"]`);
    if (!card) return;
    for (const other of this.sourcesEl.querySelectorAll("[data-active]")) delete other.dataset.active;
    card.dataset.active = "true";
    card.scrollIntoView({ block: "nearest", behavior: "smooth" });
    card.focus({ preventScroll: true });
  }

  #sources(content, citations, meta) {
    clear(this.sourcesEl);
    const numbers = Object.keys(citations).map(Number).filter(Number.isFinite).sort((a, b) => a - b);
    if (!numbers.length) {
      this.sourcesEl.append(el("p", { class: "empty", text: "No sources cited." }));
      return;
    }
    const ranks = channelRanks(meta);
    for (const n of numbers) {
      const c = citations[n] || {};
      const found = c.channels && typeof c.channels === "object"
        ? orderChannels(Object.keys(c.channels)).map((ch) => [ch, c.channels[ch]])
        : ranks(c.chunk_id);
      const quoted = c.snippet || c.text || citedFor(content, n);
      this.sourcesEl.append(
        el(
          "article",
          {
            class: "source-card",
            id: `source-${n}`,
            tabindex: "-1",
            "data-testid": "source-card",
            dataset: { n, document: c.document_id, kind: c.kind || "document" },
          },
          el(
            "header",
            {},
            el("span", { class: "num", text: `[${n}]` }),
            el("h4", { text: c.title || c.document_id || "untitled" }),
            place(c),
            c.kind === "memory" ? el("span", { class: "badge memory", "data-testid": "memory-badge", text: "memory" }) : null,
          ),
          el(
            "p",
            { class: "doc" },
            "document ",
            el("code", { "data-testid": "source-document", text: c.document_id || "?" }),
            c.source ? ` · ${c.source}` : "",
            ` · score ${fmtNum(c.score, 4)}`,
          ),
          el(
            "p",
            { class: "ranks" },
            found.length
              ? ["found by ", found.map(([ch, rank]) => el("span", { class: "rank", text: `${ch} #${rank}` }))]
              : "not in any channel's top 3 (the answer keeps each channel's best three)",
          ),
          quoted ? el("blockquote", { class: "snippet", text: short(quoted, 600) }) : null,
        ),
      );
    }
  }

  #facts(meta) {
    const dl = el("dl", { class: "facts-list" });
    const item = (term, ...value) => dl.append(el("dt", { text: term }), el("dd", {}, ...value));

    if (meta.intent) {
      item(
        "Intent",
        el("strong", { "data-testid": "answer-intent", text: meta.intent }),
        meta.intent_confidence !== null && meta.intent_confidence !== undefined
          ? ` ${fmtNum(meta.intent_confidence)}`
          : "",
        meta.intent_method ? el("span", { class: "muted", text: ` (${meta.intent_method})` }) : "",
      );
    }
    const confidence = typeof meta.confidence === "number" ? meta.confidence : null;
    item(
      "Confidence",
      el(
        "span",
        { class: "confidence", "data-testid": "confidence", dataset: { low: meta.low_confidence ? "true" : "false" } },
        bar(confidence ?? 0, meta.low_confidence ? "low" : "ok"),
        el("span", { class: "value", text: confidence === null ? "not critiqued" : fmtNum(confidence) }),
        meta.low_confidence ? el("span", { class: "badge warn", text: "low" }) : null,
      ),
    );
    const weights = meta.effective_weights || meta.weights;
    if (weights && typeof weights === "object") {
      const reports = meta.channels || {};
      const table = el("ul", { class: "weights", "data-testid": "weights" });
      for (const channel of orderChannels(Object.keys(weights))) {
        const w = Number(weights[channel]) || 0;
        const report = reports[channel] || {};
        const extra = [
          typeof report.count === "number" ? `${report.count} hits` : null,
          report.status && report.status !== "completed" ? report.status : null,
        ].filter(Boolean).join(", ");
        table.append(
          el(
            "li",
            { dataset: { channel } },
            el("span", { class: "wname", text: channel }),
            bar(w, "weight"),
            el("span", { class: "value", text: fmtNum(w) }),
            extra ? el("span", { class: "muted", text: extra }) : null,
          ),
        );
      }
      item("Effective weights", table);
    }
    const history = Array.isArray(meta.attempt_history) ? meta.attempt_history : [];
    const last = history[history.length - 1];
    if (last) {
      const scores = el("ul", { class: "scores" });
      for (const [name, value] of Object.entries(last.scores || {})) {
        scores.append(el("li", {}, el("span", { class: "wname", text: name }), bar(Number(value) || 0, "score"), el("span", { class: "value", text: fmtNum(value) })));
      }
      item(
        "Critic",
        el("strong", { "data-testid": "verdict", text: last.verdict || "–" }),
        last.strategy ? ` → ${last.strategy}` : "",
        scores,
        (last.reasons || []).length ? el("p", { class: "muted", text: last.reasons.join("; ") }) : null,
      );
    }
    if (history.length) {
      const list = el("ol", { class: "attempts", "data-testid": "attempts" });
      for (const a of history) {
        list.append(
          el(
            "li",
            { dataset: { attempt: a.attempt } },
            el("strong", { text: `#${a.attempt}` }),
            ` ${a.verdict || "–"} · ${fmtNum(a.confidence)}`,
            a.strategy ? el("span", { class: "badge strategy", text: a.strategy }) : null,
            (a.queries || []).length ? el("p", { class: "muted", text: `queries: ${a.queries.join(" | ")}` }) : null,
            (a.documents || []).length ? el("p", { class: "muted", text: `documents: ${a.documents.join(", ")}` }) : null,
          ),
        );
      }
      item(`Attempts (${meta.attempts ?? history.length})`, list);
    }
    if (Array.isArray(meta.tools) && meta.tools.length) {
      const list = el("ul", { class: "tools" });
      for (const t of meta.tools) {
        list.append(el("li", {}, el("code", { text: t.name || "tool" }), ` ${t.ok ? "ok" : "failed"} · ${fmtMs(t.duration_ms)} `, el("span", { class: "muted", text: short(t.ok ? t.output : t.error, 160) })));
      }
      item("Tools", list);
    }
    const made = [meta.generator ? `generator ${meta.generator}` : null, meta.latency_ms !== undefined ? `${fmtMs(meta.latency_ms)} end to end` : null].filter(Boolean);
    if (made.length) item("Made by", made.join(" · "));
    item("Trace id", el("code", { class: "trace", "data-testid": "trace-id", text: this.traceId || meta.trace_id || "–" }));
    clear(this.factsEl).append(dl);
  }
}

/** The answer's paragraphs, with **bold**, *emphasis*, `code` and [n] citation buttons; a
 * block that is one `#`/`##` line (a research report's title and sections) is a heading. */
export function renderContent(content, citations, onCite) {
  const blocks = content.split(/\n{2,}/).filter((b) => b.trim());
  return blocks.map((block) => {
    const heading = /^(#{1,3}) (.+)$/.exec(block.trim());
    if (heading && !block.trim().includes("\n")) {
      const level = Math.min(6, heading[1].length + 3); // under the page's own h3 "Answer"
      return el(`h${level}`, { class: "report-heading" }, inline(heading[2], citations, onCite));
    }
    const p = el("p");
    block.split("\n").forEach((line, i) => {
      if (i) p.append(el("br"));
      append(p, inline(line, citations, onCite));
    });
    return p;
  });
}

function inline(text, citations, onCite) {
  const out = [];
  let at = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > at) out.push(text.slice(at, m.index));
    if (m[1] !== undefined) {
      const n = Number(m[1]);
      if (citations[n]) {
        const c = citations[n];
        out.push(
          el("button", {
            type: "button",
            class: "cite",
            "data-testid": "citation",
            dataset: { n },
            "aria-controls": `source-${n}`,
            "aria-label": `source ${n}: ${cited(c)}`,
            title: cited(c),
            text: `[${n}]`,
            onclick: () => onCite(n),
          }),
        );
      } else {
        out.push(el("span", { class: "cite dangling", title: "no such source", text: m[0] }));
      }
    } else if (m[2] !== undefined) out.push(el("strong", { text: m[2] }));
    else if (m[3] !== undefined) out.push(el("em", { text: m[3] }));
    else out.push(el("code", { text: m[4] }));
    at = m.index + m[0].length;
  }
  if (at < text.length) out.push(text.slice(at));
  return out;
}

/** A cited passage's page ("p. 3", "slide 2"), or "" for text sent as text. */
export function pageOf(c) {
  if (!Number.isInteger(c.page) || c.page < 1) return "";
  return typeof c.page_label === "string" && c.page_label.trim() ? c.page_label.trim() : `p. ${c.page}`;
}

/** The heading that holds a passage, shortened: the last of its path ("Methods > Setup"). */
export function sectionOf(c) {
  const path = typeof c.section === "string" ? c.section.trim() : "";
  if (!path) return "";
  const parts = path.split(" > ").map((part) => part.trim()).filter(Boolean);
  return short(parts.length ? parts[parts.length - 1] : path, 48);
}

/**
 * Where a page's original file opens: `GET /v1/documents/{id}?namespace=…`, at the page for a
 * PDF (`#page=N`, which the browser's viewer reads). A plain link: the token travels in the
 * cookie the page set (SameSite=Strict, which a same-site navigation carries, and the API
 * accepts on GET, as for EventSource). Only for a passage with a page: a parsed file's.
 */
export function fileHref(c) {
  const label = pageOf(c);
  if (!label || typeof c.document_id !== "string" || !c.document_id) return null;
  const ns = typeof c.namespace === "string" && c.namespace ? `?namespace=${encodeURIComponent(c.namespace)}` : "";
  const pdf = /^p\.\s/.test(label) || /\.pdf$/i.test(String(c.title || c.document_id));
  return `/v1/documents/${encodeURIComponent(c.document_id)}${ns}${pdf ? `#page=${c.page}` : ""}`;
}

/** The title, page and section of a citation as one line: "report.pdf · p. 3 · Methods". */
function cited(c) {
  return [c.title || c.document_id || "", pageOf(c), sectionOf(c)].filter(Boolean).join(" · ");
}

/** A source card's page (a link to the original file, at that page) and section. */
function place(c) {
  const page = pageOf(c);
  const section = sectionOf(c);
  if (!page && !section) return null;
  const href = fileHref(c);
  const pageEl = !page
    ? null
    : href
      ? el("a", {
          class: "page",
          href,
          target: "_blank",
          rel: "noopener noreferrer",
          "data-testid": "source-page",
          title: `open ${c.title || c.document_id} at ${page}`,
          text: page,
        })
      : el("span", { class: "page", "data-testid": "source-page", text: page });
  return el(
    "span",
    { class: "place", "data-testid": "source-place" },
    pageEl,
    page && section ? " · " : "",
    section ? el("span", { class: "section", "data-testid": "source-section", title: c.section, text: section }) : null,
  );
}

/** The answer's sentences that cite [n], markers and emphasis removed. */
export function citedFor(content, n) {
  const marker = `[${n}]`;
  return content
    .split(/(?<=[.!?])\s+|\n+/)
    .filter((s) => s.includes(marker))
    .map((s) => s.replace(/\s*\[\d{1,3}\]/g, "").replace(/[*`]/g, "").trim())
    .filter(Boolean)
    .join(" … ");
}

/** chunk id -> [[channel, rank]]: from the full rankings (retrieve mode), for a citation without its own. */
function channelRanks(meta) {
  const table = new Map();
  const note = (channel, ids) => {
    ids.forEach((id, i) => {
      if (!table.has(id)) table.set(id, new Map());
      if (!table.get(id).has(channel)) table.get(id).set(channel, i + 1);
    });
  };
  const full = meta.retrieval && meta.retrieval.channels;
  if (full && typeof full === "object") {
    for (const [channel, list] of Object.entries(full)) note(channel, (list || []).map((x) => x.chunk_id));
  }
  return (chunkId) => {
    const found = table.get(chunkId);
    return found ? orderChannels([...found.keys()]).map((ch) => [ch, found.get(ch)]) : [];
  };
}

function retrievalTable(retrieval) {
  const channels = orderChannels(Object.keys(retrieval.channels || {}));
  const rankOf = new Map(channels.map((ch) => [ch, new Map((retrieval.channels[ch] || []).map((x, i) => [x.chunk_id, i + 1]))]));
  const head = el("tr", {}, el("th", { scope: "col", text: "#" }), el("th", { scope: "col", text: "document" }), el("th", { scope: "col", text: "score" }), channels.map((ch) => el("th", { scope: "col", text: ch })));
  const body = el("tbody");
  (retrieval.fused || []).forEach((x, i) => {
    body.append(
      el(
        "tr",
        { "data-testid": "retrieved" },
        el("td", { text: String(i + 1) }),
        el("td", {}, el("code", { text: x.document_id })),
        el("td", { text: fmtNum(x.score, 4) }),
        channels.map((ch) => el("td", { text: String(rankOf.get(ch).get(x.chunk_id) ?? "–") })),
      ),
    );
  });
  return el("div", { class: "table-wrap" }, el("table", { class: "retrieval" }, el("thead", {}, head), body));
}

function orderChannels(names) {
  return [...names].sort((a, b) => {
    const ia = CHANNELS.indexOf(a);
    const ib = CHANNELS.indexOf(b);
    return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || a.localeCompare(b);
  });
}

function bar(value, kind) {
  const fill = el("span", { class: "fill" });
  fill.style.width = pct(Number(value) || 0);
  return el("span", { class: `meter ${kind}`, "aria-hidden": "true" }, fill);
}
