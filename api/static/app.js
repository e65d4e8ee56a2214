// The page: sign-in when the API asks for a token, the question form, one request's live
// stream (phases, tokens, answer), documents and history. Errors are shown as the API
// wrote them, in the alert region; nothing here inserts API data as markup.

import * as api from "./api.js";
import { AnswerView } from "./answer.js";
import { Connect } from "./connect.js";
import { Conversation } from "./conversation.js";
import { Documents } from "./documents.js";
import { $, clear, el, fmtTime, short } from "./dom.js";
import { Follower } from "./stream.js";
import { Timeline } from "./timeline.js";

const EVENT_NAMES = ["phase", "token", "answer", "error", "done"];
const LOG_LIMIT = 400;
const TERMINAL = new Set(["completed", "failed", "timed_out", "cancelled"]);

const alerts = $("#alerts");
const timeline = new Timeline($("#timeline"));
const answer = new AnswerView({ answer: $("#answer"), note: $("#answer-note"), sources: $("#sources"), facts: $("#facts") });
const documents = new Documents({ report, notify });
const conversation = new Conversation({ report, onOpen: (id, query) => open(id, query) });
const connect = new Connect();

let current = null; // { id, follower }
let askedForToken = false;

// -- alerts ---------------------------------------------------------------------------------

/** Show an error as it came: an ApiError as `code: message (field)`, anything else as text. */
function report(error) {
  const text = error instanceof api.ApiError ? error.describe() : String(error && error.message ? error.message : error);
  const item = el(
    "div",
    { class: "alert", "data-testid": "alert" },
    el("p", { text }),
    el("button", { type: "button", class: "link", "aria-label": "Dismiss", text: "×", onclick: () => item.remove() }),
  );
  alerts.append(item);
  while (alerts.children.length > 5) alerts.firstElementChild.remove();
}

function notify(message) {
  $("#stream-state").textContent = message;
}

window.addEventListener("error", (event) => report(event.error || event.message));
window.addEventListener("unhandledrejection", (event) => report(event.reason));

// -- auth -----------------------------------------------------------------------------------

api.onUnauthorized((error) => askForToken(error.message));

function askForToken(message) {
  const section = $("#auth");
  const wasHidden = section.hidden;
  section.hidden = false;
  $("#auth-message").textContent = askedForToken && message ? `The API refused it: ${message}` : "";
  if (wasHidden) $("#token-input").focus();
  askedForToken = true;
}

$("#auth-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const value = $("#token-input").value.trim();
  if (!value) return;
  if (!api.cookieSafe(value)) {
    $("#auth-message").textContent = "That token has characters a cookie cannot carry (spaces, ; , \" or \\).";
    return;
  }
  api.setToken(value);
  if (await whoami()) {
    $("#token-input").value = "";
    $("#auth").hidden = true;
    $("#query").focus();
  }
});

$("#sign-out").addEventListener("click", () => {
  api.clearToken();
  location.reload();
});

async function whoami() {
  try {
    const who = await api.get("/v1/whoami");
    $("[data-testid=whoami]").textContent = `tenant ${who.tenant} · auth ${who.auth_mode}`;
    $("#sign-out").hidden = !api.token();
    await Promise.all([documents.refresh(), loadHistory(), conversation.refresh(), connect.refresh()]);
    return true;
  } catch (error) {
    if (error.status !== 401) report(error);
    $("[data-testid=whoami]").textContent = error.status === 401 ? "not signed in" : "API unreachable";
    return false;
  }
}

// -- ask --------------------------------------------------------------------------------------

const form = $("#ask-form");
form.addEventListener("submit", (event) => {
  event.preventDefault();
  ask();
});
$("#query").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    ask();
  }
});

async function ask() {
  const query = $("#query").value.trim();
  if (!query) {
    report(new api.ApiError(0, "validation_error", "query: must not be empty or whitespace only", "query"));
    $("#query").focus();
    return;
  }
  const body = { query, mode: $("#mode").value };
  const intent = $("#intent").value;
  if (intent) body.intent = intent;
  const topK = $("#top-k").value.trim();
  if (topK) body.top_k = Number(topK);
  const namespaces = $("#namespaces").value.split(",").map((s) => s.trim()).filter(Boolean);
  if (namespaces.length) body.namespaces = namespaces;
  const session = conversation.sessionFor();
  if (session) body.session_id = session;
  const filter = $("#filter").value.trim();
  if (filter) {
    try {
      body.filter = JSON.parse(filter);
    } catch (error) {
      report(new api.ApiError(0, "validation_error", `filter: not JSON (${error.message})`, "filter"));
      focusField("filter");
      return;
    }
  }

  const submit = $("[data-testid=submit]");
  submit.disabled = true;
  try {
    const accepted = await api.post("/v1/queries", body);
    open(accepted.request_id, query, accepted.events_url);
    loadHistory();
    conversation.refresh();
  } catch (error) {
    report(error);
    focusField(error.field);
  } finally {
    submit.disabled = false;
  }
}

/** The form control an API error names (`namespaces.0` -> the namespaces box), focused. */
function focusField(field) {
  const controls = {
    query: "#query", top_k: "#top-k", namespaces: "#namespaces", intent: "#intent", mode: "#mode", filter: "#filter",
  };
  const selector = field ? controls[String(field).split(".")[0]] : null;
  if (!selector) return;
  const control = $(selector);
  control.setAttribute("aria-invalid", "true");
  control.addEventListener("input", () => control.removeAttribute("aria-invalid"), { once: true });
  control.focus();
}

/** Show one request from its first event: a fresh EventSource, no Last-Event-ID. */
function open(requestId, query, eventsUrl) {
  if (current) current.follower.close();
  timeline.reset(query);
  answer.reset();
  clear($("#event-log"));
  $("#run-query").textContent = query || "";
  showStandalone(null);
  $("#run").dataset.request = requestId;
  delete $("#run").dataset.status;
  setBadge("#resumed", 0, (n) => `resumed ${n}×`);
  setBadge("#ignored", 0, (n) => `${n} repeated event${n > 1 ? "s" : ""} ignored`);
  const url = eventsUrl || `/v1/queries/${encodeURIComponent(requestId)}/events`;
  const follower = new Follower(url, EVENT_NAMES, {
    onEvent: (name, event, seq) => apply(name, event, seq),
    onIgnored: (n) => setBadge("#ignored", n, (k) => `${k} repeated event${k > 1 ? "s" : ""} ignored`),
    onResume: (n) => setBadge("#resumed", n, (k) => `resumed ${k}×`),
    onState: (state) => {
      if (current && current.follower === follower && !current.ended) notify(state);
    },
    onFail: () => streamFailed(requestId),
    onBadData: (name) => report(new Error(`a ${name} event that is not JSON was skipped`)),
  });
  current = { id: requestId, follower, ended: false };
  notify("connecting");
  fetchView(requestId);
}

function apply(name, event, seq) {
  logEvent(name, event, seq);
  switch (name) {
    case "phase":
      timeline.add(event);
      if (event.data && event.data.phase === "query_rewrite" && event.data.status === "completed") {
        showStandalone((event.data.metadata || {}).standalone_query);
      }
      break;
    case "token":
      answer.token(event.data || {}, Number(event.attempt) || 1);
      break;
    case "answer":
      answer.answer(event.data || {});
      break;
    case "error":
      answer.error(event.data || {});
      break;
    case "done": {
      const status = (event.data && event.data.status) || "done";
      current.ended = true;
      current.follower.close();
      timeline.finish();
      answer.ended(status);
      notify(status);
      $("#run").dataset.status = status;
      fetchView(event.request_id || current.id);
      loadHistory();
      conversation.refresh({ ended: event.request_id || current.id });
      break;
    }
    default:
      break;
  }
}

/** "understood as …" under the question, when a follow-up was made standalone. */
function showStandalone(standalone) {
  const line = $("#run-standalone");
  const asked = $("#run-query").textContent;
  line.hidden = !standalone || standalone === asked;
  clear(line);
  if (!line.hidden) line.append("understood as ", el("q", { text: standalone }));
}

async function fetchView(requestId) {
  try {
    const view = await api.get(`/v1/queries/${encodeURIComponent(requestId)}`);
    if (!current || current.id !== requestId) return;
    if (view.trace_id) answer.setTrace(view.trace_id);
    if (view.standalone_query) showStandalone(view.standalone_query);
    if (view.error && !$("#answer [data-testid=answer-error]") && TERMINAL.has(view.status)) answer.error(view.error);
  } catch (error) {
    report(error);
  }
}

/** EventSource gave up (the API refused the stream): say why, from the request's status. */
async function streamFailed(requestId) {
  if (!current || current.id !== requestId) return;
  notify("stream closed");
  try {
    const view = await api.get(`/v1/queries/${encodeURIComponent(requestId)}`);
    report(new Error(`the event stream of ${requestId} closed; the request is ${view.status}`));
  } catch (error) {
    report(error);
  }
}

function logEvent(name, event, seq) {
  const log = $("#event-log");
  const data = event.data || {};
  let what = "";
  if (name === "phase") what = `${data.phase} ${data.status}`;
  else if (name === "token") what = `#${data.index} ${short(data.text, 60)}`;
  else if (name === "done") what = data.status;
  else if (name === "error") what = `${data.code}: ${short(data.message, 80)}`;
  else if (name === "answer") what = `${Object.keys(data.citations || {}).length} citations`;
  // the SSE id: `<seq>`, or `<seq>.<part>` for one of several phase events stored in one message
  const id = Number.isInteger(event.part) ? `${seq}.${event.part}` : String(seq);
  log.append(
    el(
      "li",
      { dataset: { id, seq, type: name, index: name === "token" ? data.index : undefined } },
      el("span", { class: "seq", text: id }),
      el("span", { class: "etype", text: name }),
      el("span", { class: "muted", text: what }),
    ),
  );
  while (log.children.length > LOG_LIMIT) log.firstElementChild.remove();
}

function setBadge(selector, count, text) {
  const badge = $(selector);
  badge.hidden = count <= 0;
  badge.dataset.count = String(count);
  badge.textContent = count > 0 ? text(count) : "";
}

// -- history ----------------------------------------------------------------------------------

$("#refresh-history").addEventListener("click", () => loadHistory());

async function loadHistory() {
  const list = $("#history-list");
  try {
    const recent = await api.get("/v1/queries?limit=20");
    clear(list);
    const requests = (recent && recent.requests) || [];
    if (!requests.length) list.append(el("li", { class: "empty", text: "No requests yet." }));
    for (const r of requests) {
      list.append(
        el(
          "li",
          { "data-testid": "history-item", dataset: { request: r.request_id, status: r.status } },
          el("button", {
            type: "button",
            class: "history-open",
            text: r.query,
            title: `Replay ${r.request_id} from its first event`,
            onclick: () => {
              $("#query").value = r.query;
              open(r.request_id, r.query);
              $("#run").scrollIntoView({ block: "start", behavior: "smooth" });
            },
          }),
          el("span", { class: `status s-${r.status}`, text: r.status }),
          el("time", { datetime: r.created_at, text: fmtTime(r.created_at) }),
        ),
      );
    }
  } catch (error) {
    if (error.status !== 401) report(error);
  }
}

// -- start ------------------------------------------------------------------------------------

api.restoreToken();
whoami().then((ok) => {
  document.body.dataset.ready = ok ? "true" : "auth";
});
