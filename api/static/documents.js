// Documents: upload files (drop or picker) or pasted text into a namespace as an ingest job,
// follow each job's progress live, list a namespace's documents and delete them.

import * as api from "./api.js";
import { $, clear, el, fmtBytes } from "./dom.js";
import { Follower } from "./stream.js";

const NAMESPACE = /^[a-z0-9](?:[a-z0-9-]|_[a-z0-9-])*_?$/;
const MAX_FILE_BYTES = 2_000_000;
const TEXT_FILE = /\.(md|markdown|txt|text)$/i;

export class Documents {
  constructor({ report, notify }) {
    this.report = report; // (error) => shows it in the alert region
    this.notify = notify; // (message) => a transient status message
    this.namespaceInput = $("#doc-namespace");
    this.jobsEl = $("#jobs");
    this.listEl = $("#doclist");
    this.spacesEl = $("#namespace-list");
    this.followers = new Set();

    const upload = $("#upload");
    upload.addEventListener("change", () => {
      const files = [...upload.files];
      upload.value = "";
      this.uploadFiles(files);
    });
    const drop = $("#drop");
    drop.addEventListener("dragover", (event) => {
      event.preventDefault();
      drop.dataset.over = "true";
    });
    drop.addEventListener("dragleave", () => delete drop.dataset.over);
    drop.addEventListener("drop", (event) => {
      event.preventDefault();
      delete drop.dataset.over;
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

  async uploadFiles(files) {
    if (!files.length) return;
    const namespace = this.namespace();
    if (!namespace) return;
    const documents = [];
    for (const file of files) {
      if (!TEXT_FILE.test(file.name) && !(file.type || "").startsWith("text/")) {
        this.report(new api.ApiError(0, "unsupported_file", `${file.name}: only Markdown or text files can be uploaded`));
        continue;
      }
      if (file.size > MAX_FILE_BYTES) {
        this.report(new api.ApiError(0, "too_large", `${file.name}: ${fmtBytes(file.size)} is over the 2 MB a document may hold`));
        continue;
      }
      const text = await file.text();
      if (!text.trim()) {
        this.report(new api.ApiError(0, "empty_file", `${file.name} is empty`));
        continue;
      }
      documents.push({ id: documentId(file.name), title: titleOf(text, file.name), text, namespace });
    }
    if (documents.length) await this.#send(documents, `${documents.length} file${documents.length > 1 ? "s" : ""}`);
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

  /** A job's row with its <progress>, fed by the job's SSE stream until it ends. */
  follow(accepted, label, expected) {
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
        if (d.status === "completed" || d.status === "failed") {
          follower.close();
          this.followers.delete(follower);
          this.refresh();
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
        } catch (error) {
          state.textContent = "progress unavailable";
          this.report(error);
        }
      },
    });
    this.followers.add(follower);
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

/** The first Markdown heading, else the file name without its extension. */
function titleOf(text, fileName) {
  const heading = text.match(/^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$/m);
  return (heading ? heading[1] : fileName.replace(/\.[^.]+$/, "")).slice(0, 1000);
}
