// Documents: upload files (drop or picker: PDF, Word, PowerPoint, HTML, images, Markdown,
// text) or pasted text into a namespace as an ingest job, follow each file from its upload's
// bytes through its parse to its index, list a namespace's documents and delete them.

import * as api from "./api.js";
import { $, clear, el, fmtBytes } from "./dom.js";
import { Follower } from "./stream.js";

const NAMESPACE = /^[a-z0-9](?:[a-z0-9-]|_[a-z0-9-])*_?$/;
/** The kinds of file the parse workers read, by name (the API checks the bytes too). */
export const SUPPORTED_SUFFIXES = [".pdf", ".png", ".jpg", ".jpeg", ".tif", ".tiff", ".docx", ".pptx", ".html", ".htm", ".md", ".markdown", ".txt"];
const SUPPORTED_KINDS = "PDF, Word (.docx), PowerPoint (.pptx), HTML, images (PNG, JPEG, TIFF), Markdown or text";
const MAX_FILES_PER_CALL = 100; // the API's bound on one multipart request
const MAX_ID_CHARS = 256;

export class Documents {
  constructor({ report, notify }) {
    this.report = report; // (error) => shows it in the alert region
    this.notify = notify; // (message) => a transient status message
    this.namespaceInput = $("#doc-namespace");
    this.jobsEl = $("#jobs");
    this.uploadsEl = $("#uploads");
    this.listEl = $("#doclist");
    this.spacesEl = $("#namespace-list");
    this.followers = new Set();

    const upload = $("#upload");
    upload.addEventListener("change", () => {
      const files = [...upload.files];
      upload.value = "";
      this.uploadFiles(files);
    });
    // the drop state: dragenter/dragleave also fire over the zone's children, so count them
    const drop = $("#drop");
    let depth = 0;
    const over = (on) => {
      if (on) drop.dataset.over = "true";
      else delete drop.dataset.over;
    };
    drop.addEventListener("dragenter", (event) => {
      event.preventDefault();
      depth += 1;
      over(true);
    });
    drop.addEventListener("dragover", (event) => {
      event.preventDefault();
      if (event.dataTransfer) event.dataTransfer.dropEffect = "copy";
      over(true);
    });
    drop.addEventListener("dragleave", () => {
      depth = Math.max(0, depth - 1);
      if (!depth) over(false);
    });
    drop.addEventListener("drop", (event) => {
      event.preventDefault();
      depth = 0;
      over(false);
      this.uploadFiles([...(event.dataTransfer?.files || [])]);
    });
    $("#paste-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.uploadPasted();
    });
    $("#refresh-docs").addEventListener("click", () => this.refresh());
    this.namespaceInput.addEventListener("change", () => this.refresh());
  }

  namespace() {
    const value = this.namespaceInput.value.trim() || "default";
    if (!NAMESPACE.test(value) || value.length > 63) {
      this.report(new api.ApiError(0, "invalid_namespace", `invalid namespace ${JSON.stringify(value)}: use 1-63 lowercase letters, digits, '_' or '-', starting with a letter or digit, and no '__'`, "namespace"));
      this.namespaceInput.focus();
      return null;
    }
    return value;
  }

  /**
   * Files as documents: one row each. A file the API would refuse (a kind not read, empty, a
   * name that makes no id or the id of another file here) is refused in the page, with the
   * reason, before anything is sent: the API takes a batch whole or refuses it whole. The
   * rest go up as `multipart/form-data`, one request (one ingest job) per 100 files.
   */
  async uploadFiles(files) {
    if (!files.length) return;
    const namespace = this.namespace();
    if (!namespace) return;
    const taken = new Map(); // document id -> the file name that has it
    const rows = files.map((file) => new FileRow(file));
    this.uploadsEl.prepend(...rows.map((row) => row.el)); // the newest drop first, in its order
    const sending = [];
    for (const row of rows) {
      const { file } = row;
      const refusal = refusalOf(file, taken);
      if (refusal) {
        row.refuse(refusal);
        continue;
      }
      taken.set(row.documentId, file.name);
      sending.push(row);
    }
    for (let i = 0; i < sending.length; i += MAX_FILES_PER_CALL) {
      await this.#sendFiles(sending.slice(i, i + MAX_FILES_PER_CALL), namespace);
    }
  }

  async #sendFiles(rows, namespace) {
    let accepted;
    try {
      accepted = await uploadForm(rows, namespace);
    } catch (error) {
      for (const row of rows) row.fail(`not uploaded: ${error instanceof api.ApiError ? error.describe() : error}`);
      this.report(error);
      if (error.status === 401) api.get("/v1/whoami").catch(() => {}); // the page asks for a token
      return;
    }
    for (const row of rows) row.queued(accepted.job_id);
    const byId = new Map(rows.map((row) => [row.documentId, row]));
    const label = rows.length === 1 ? rows[0].file.name : `${rows.length} files`;
    this.follow(accepted, `Upload of ${label} to ${namespace}`, rows.length, {
      onProgress: (d) => byId.get(d.document_id)?.progress(d),
      onEnd: (job) => {
        const errors = job?.errors || {};
        for (const row of rows) row.settle(job?.status, errors[row.documentId]);
      },
    });
    this.refresh();
  }

  async uploadPasted() {
    const namespace = this.namespace();
    if (!namespace) return;
    const titleInput = $("#paste-title");
    const textInput = $("#paste-text");
    const title = titleInput.value.trim();
    const text = textInput.value;
    if (!title || !text.trim()) {
      this.report(new api.ApiError(0, "missing_field", "a pasted document needs a title and a text", title ? "text" : "title"));
      (title ? textInput : titleInput).focus();
      return;
    }
    const ok = await this.#send([{ id: documentId(title), title, text, namespace }], `“${title}”`);
    if (ok) {
      titleInput.value = "";
      textInput.value = "";
    }
  }

  async #send(documents, label) {
    try {
      const accepted = await api.post("/v1/documents", { documents });
      this.follow(accepted, `Upload of ${label} to ${documents[0].namespace}`, documents.length);
      this.refresh();
      return true;
    } catch (error) {
      this.report(error);
      return false;
    }
  }

  /**
   * A job's row with its <progress>, fed by the job's SSE stream until it ends. `hooks`:
   * onProgress(data) for each progress event, onEnd(job) once with the job as
   * `GET /v1/ingest/{job}` tells it at the end (its per-document `errors`), or null.
   */
  follow(accepted, label, expected, hooks = {}) {
    const progress = el("progress", {
      max: String(Math.max(1, expected || 1)),
      value: "0",
      "data-testid": "ingest-progress",
      dataset: { job: accepted.job_id, status: "running" },
      "aria-label": label,
    });
    const state = el("span", { class: "job-state", "data-testid": "ingest-status", text: "queued" });
    const row = el("li", { class: "job", dataset: { job: accepted.job_id } }, el("span", { class: "job-label", text: label }), progress, state);
    this.jobsEl.prepend(row);
    const url = accepted.events_url || `/v1/ingest/${encodeURIComponent(accepted.job_id)}/events`;
    const follower = new Follower(url, ["progress"], {
      onEvent: (_name, event) => {
        const d = event.data || {};
        const total = d.expected ?? expected ?? 1;
        const handled = (d.documents_done || 0) + (d.documents_failed || 0) + (d.documents_unchanged || 0);
        progress.max = Math.max(1, total);
        progress.value = d.status === "completed" ? progress.max : Math.min(handled, progress.max);
        progress.dataset.status = d.status;
        const parts = [`${handled}/${total} documents`, `${d.chunks || 0} chunks`];
        if (d.documents_unchanged) parts.push(`${d.documents_unchanged} unchanged`);
        if (d.documents_failed) parts.push(`${d.documents_failed} failed`);
        if (d.duplicates) parts.push(`${d.duplicates} duplicates dropped`);
        state.textContent = `${d.status} · ${parts.join(" · ")}`;
        if (d.error) {
          this.report(new api.ApiError(0, "ingest_failed", `${d.document_id || "a document"}: ${d.error}`));
        }
        hooks.onProgress?.(d);
        if (d.status === "completed" || d.status === "failed") {
          follower.close();
          this.followers.delete(follower);
          this.refresh();
          if (hooks.onEnd) this.#ended(accepted.job_id, hooks.onEnd);
        }
      },
      onResume: (n) => {
        row.dataset.resumed = String(n);
      },
      onFail: async () => {
        this.followers.delete(follower);
        try {
          const job = await api.get(`/v1/ingest/${encodeURIComponent(accepted.job_id)}`);
          progress.dataset.status = job.status;
          state.textContent = `${job.status} · ${job.documents_done}/${job.expected ?? "?"} documents (progress stream closed)`;
          hooks.onEnd?.(job);
        } catch (error) {
          state.textContent = "progress unavailable";
          this.report(error);
          hooks.onEnd?.(null);
        }
      },
    });
    this.followers.add(follower);
  }

  /** The job as the API keeps it once it ended: which documents failed, and why. */
  async #ended(jobId, onEnd) {
    try {
      onEnd(await api.get(`/v1/ingest/${encodeURIComponent(jobId)}`));
    } catch (error) {
      this.report(error);
      onEnd(null);
    }
  }

  async refresh() {
    const namespace = this.namespaceInput.value.trim() || "default";
    try {
      const [spaces, listed] = await Promise.all([
        api.get("/v1/namespaces"),
        NAMESPACE.test(namespace) ? api.get(`/v1/documents?namespace=${encodeURIComponent(namespace)}`) : null,
      ]);
      this.#namespaces(spaces?.namespaces || [], namespace);
      this.#documents(listed);
    } catch (error) {
      this.report(error);
    }
  }

  #namespaces(spaces, current) {
    clear(this.spacesEl);
    for (const space of spaces) {
      const button = el("button", {
        type: "button",
        class: "chip",
        "aria-pressed": space.namespace === current ? "true" : "false",
        text: `${space.namespace} (${space.documents})`,
        onclick: () => {
          this.namespaceInput.value = space.namespace;
          this.refresh();
        },
      });
      this.spacesEl.append(el("li", {}, button));
    }
  }

  #documents(listed) {
    clear(this.listEl);
    if (!listed) return;
    if (!listed.documents.length) {
      this.listEl.append(el("li", { class: "empty", text: `No documents in ${listed.namespace} yet.` }));
      return;
    }
    for (const doc of listed.documents) {
      this.listEl.append(
        el(
          "li",
          { "data-testid": "document", dataset: { id: doc.id } },
          el("code", { class: "doc-id", text: doc.id }),
          el("span", { class: "muted", text: fmtBytes(doc.bytes) }),
          el("button", {
            type: "button",
            class: "danger small",
            "data-testid": "delete-document",
            "aria-label": `Delete ${doc.id} from ${listed.namespace}`,
            text: "Delete",
            onclick: () => this.remove(listed.namespace, doc.id),
          }),
        ),
      );
    }
  }

  async remove(namespace, id) {
    try {
      const accepted = await api.del(`/v1/documents/${encodeURIComponent(id)}?namespace=${encodeURIComponent(namespace)}`);
      this.follow(accepted, `Delete ${id} from ${namespace}`, 1);
      this.notify(`Deleting ${id}…`);
      this.refresh();
    } catch (error) {
      this.report(error);
    }
  }
}

/** A document id from a file name or title: no white space, at most 256 characters. */
export function documentId(name) {
  const id = name.trim().replace(/\s+/g, "-").slice(0, 256);
  return id || `doc-${Date.now()}`;
}

/** The document id the API makes of an uploaded file's name: white space runs become `_`. */
export function fileDocumentId(name) {
  return name.replace(/\//g, "__").replace(/\ufeff/g, " ").trim().split(/\s+/).filter(Boolean).join("_");
}

function suffixOf(name) {
  const dot = name.lastIndexOf(".");
  return dot > 0 ? name.slice(dot).toLowerCase() : "";
}

/** Why the page will not send `file`, as a sentence; null when it goes. */
export function refusalOf(file, taken = new Map()) {
  const suffix = suffixOf(file.name);
  if (!SUPPORTED_SUFFIXES.includes(suffix)) {
    const kind = suffix ? `a ${suffix} file` : "a file without a suffix";
    return `${file.name} is ${kind}, which cannot be read: upload ${SUPPORTED_KINDS} files (${SUPPORTED_SUFFIXES.join(" ")}).`;
  }
  if (!file.size) return `${file.name} is empty.`;
  const id = fileDocumentId(file.name);
  if (!id || id.length > MAX_ID_CHARS) return `${file.name}: the name makes no document id; name the file with 1-256 characters.`;
  if (taken.has(id)) return `${file.name} and ${taken.get(id)} would both be document ${id}: upload one of them.`;
  return null;
}

const STATE_TEXT = {
  waiting: "waiting to upload",
  sent: "uploaded, waiting for the API",
  queued: "queued for parsing",
};

/** One file's row: its upload's bytes, then its parse (pages), then indexed or failed. */
class FileRow {
  constructor(file) {
    this.file = file;
    this.documentId = fileDocumentId(file.name);
    this.pages = null;
    this.bar = el("progress", {
      class: "file-progress",
      max: String(Math.max(1, file.size)),
      value: "0",
      "data-testid": "upload-progress",
      "aria-label": `Upload of ${file.name}`,
    });
    this.stateEl = el("span", { class: "file-state", "data-testid": "file-state" });
    this.el = el(
      "li",
      { class: "upload-file", "data-testid": "upload-file", dataset: { name: file.name, document: this.documentId } },
      el("span", { class: "file-name", text: file.name }),
      el("span", { class: "file-size muted", text: fmtBytes(file.size) }),
      this.bar,
      this.stateEl,
    );
    this.#set("waiting");
  }

  #set(state, text = STATE_TEXT[state]) {
    this.state = state;
    this.el.dataset.state = state;
    this.stateEl.textContent = text;
  }

  get settled() {
    return ["refused", "indexed", "failed"].includes(this.state);
  }

  refuse(sentence) {
    this.bar.hidden = true;
    this.#set("refused", sentence);
  }

  uploading(bytes) {
    const size = Math.max(1, this.file.size);
    const sent = Math.max(0, Math.min(size, bytes));
    this.bar.value = sent;
    this.#set("uploading", `uploading ${Math.floor((100 * sent) / size)}%`);
  }

  sent() {
    this.bar.value = this.bar.max;
    this.#set("sent");
  }

  queued(jobId) {
    this.bar.value = this.bar.max;
    this.el.dataset.job = jobId;
    this.#set("queued");
  }

  /** "12 pages"; "" for a file without pages (text, Markdown). */
  #pagesText() {
    return this.pages ? `${this.pages} page${this.pages === 1 ? "" : "s"}` : "";
  }

  /** A progress event about this file's document. */
  progress(d) {
    if (this.settled) {
      // the parse's event may come after its index's: keep the page count, not the stage
      if (d.stage === "parsed" && Number.isInteger(d.pages) && this.state === "indexed") {
        this.pages = d.pages;
        this.#indexed();
      }
      return;
    }
    if (d.stage === "parsed") {
      if (Number.isInteger(d.pages)) this.pages = d.pages;
      const pages = this.#pagesText();
      this.#set("parsed", pages ? `parsed: ${pages}` : "parsed");
    } else if (d.error) {
      this.fail(d.error);
    } else {
      this.#indexed();
    }
  }

  #indexed() {
    const pages = this.#pagesText();
    this.#set("indexed", pages ? `indexed · ${pages}` : "indexed");
  }

  fail(reason) {
    this.#set("failed", `failed: ${reason}`);
  }

  /** The job ended: a file no event settled takes what the job says of it. */
  settle(status, error) {
    if (this.settled) return;
    if (error) this.fail(error);
    else if (status === "completed") this.progress({});
    else this.fail(status ? `the job ${status}` : "its job's progress is unavailable");
  }
}

/**
 * `POST /v1/documents` as `multipart/form-data` through XMLHttpRequest, whose upload reports
 * its bytes (fetch's does not), with the bearer token as `api.request` sends it. Resolves to
 * the `IngestAccepted`; rejects with an `ApiError` in the API's shape.
 */
function uploadForm(rows, namespace) {
  const form = new FormData();
  form.append("namespace", namespace);
  for (const row of rows) form.append("files", row.file, row.file.name);
  // the parts go in order: the bytes sent so far, less the files before, are a file's
  const offsets = [];
  let total = 0;
  for (const row of rows) {
    offsets.push(total);
    total += row.file.size;
  }
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/v1/documents");
    xhr.setRequestHeader("Accept", "application/json");
    const bearer = api.token();
    if (bearer) xhr.setRequestHeader("Authorization", `Bearer ${bearer}`);
    xhr.upload.onprogress = (event) => {
      // the body's framing (boundaries, part headers) is spread over the files' bytes
      const files = event.lengthComputable && event.total ? (event.loaded * total) / event.total : event.loaded;
      rows.forEach((row, i) => row.uploading(files - offsets[i]));
    };
    xhr.upload.onload = () => rows.forEach((row) => row.sent());
    xhr.onerror = () => reject(new api.ApiError(0, "network_error", "could not reach the API (the upload failed)"));
    xhr.onabort = () => reject(new api.ApiError(0, "aborted", "the upload was cancelled"));
    xhr.onload = () => {
      let data = null;
      try {
        data = xhr.responseText ? JSON.parse(xhr.responseText) : null;
      } catch {
        data = null;
      }
      if (xhr.status >= 200 && xhr.status < 300 && data) {
        resolve(data);
        return;
      }
      const detail = data && typeof data === "object" ? data.error : null;
      reject(
        new api.ApiError(
          xhr.status,
          (detail && detail.code) || `http_${xhr.status}`,
          (detail && detail.message) || xhr.responseText.trim().slice(0, 500) || xhr.statusText || "upload failed",
          (detail && detail.field) || null,
        ),
      );
    };
    xhr.send(form);
  });
}
