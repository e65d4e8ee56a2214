// The conversation the question form belongs to: one session id per browser tab, the turns
// the API keeps for it (`GET /v1/sessions/{id}`), a new conversation, and forgetting one.
// A follow-up is shown as it was asked and, when the pipeline made it standalone, as it was
// understood. Nothing here inserts API data as markup.

import * as api from "./api.js";
import { $, clear, el, short } from "./dom.js";

const KEY = "ragbus_session";
const ASKED = "ragbus_session_asked";
const ANSWER_CHARS = 280;
const RECORD_RETRIES = 5; // 0.25 + 0.5 + 1 + 2 + 4 s for a turn to be recorded after its `done`

function newId() {
  const bytes = new Uint8Array(8);
  crypto.getRandomValues(bytes);
  return "web-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export class Conversation {
  constructor({ report, onOpen }) {
    this.report = report;
    this.onOpen = onOpen;
    this.id = sessionStorage.getItem(KEY) || this.#start();
    $("#new-conversation").addEventListener("click", () => this.restart());
    $("#forget-conversation").addEventListener("click", () => this.forget());
    this.#showId();
  }

  /** The session a question joins, or null when the box "continue the conversation" is off. */
  sessionFor() {
    if (!$("#in-conversation").checked) return null;
    sessionStorage.setItem(ASKED, this.id);
    return this.id;
  }

  restart() {
    this.#start();
    this.#showId();
    this.render([]);
    $("#query").focus();
  }

  async forget() {
    try {
      await api.del(`/v1/sessions/${encodeURIComponent(this.id)}`);
    } catch (error) {
      if (error.status !== 404) {
        this.report(error);
        return;
      }
    }
    this.restart();
  }

  // `ended`: a request whose `done` the page just saw. Its turn's outcome (answer, the question
  // as understood) is recorded by the memory worker a moment after that `done`, so while the
  // API still shows the turn as submitted, ask again, a few times, backing off.
  async refresh({ ended = null, attempt = 0 } = {}) {
    if (sessionStorage.getItem(ASKED) !== this.id) {
      this.render([]); // nothing asked in it from this tab yet: the API has no turn to show
      return;
    }
    try {
      const session = await api.get(`/v1/sessions/${encodeURIComponent(this.id)}`);
      const turns = session.turns || [];
      this.render(turns);
      const pending = ended && turns.some((t) => t.request_id === ended && t.status === "submitted");
      if (pending && attempt < RECORD_RETRIES) {
        setTimeout(() => this.refresh({ ended, attempt: attempt + 1 }), 250 * 2 ** attempt);
      }
    } catch (error) {
      if (error.status === 404) this.render([]);
      else if (error.status !== 401) this.report(error);
    }
  }

  render(turns) {
    const list = $("#turns");
    clear(list);
    $("#conversation").dataset.turns = String(turns.length);
    $("#forget-conversation").disabled = !turns.length;
    if (!turns.length) {
      list.append(el("li", { class: "empty", text: "No question in this conversation yet: follow-ups are understood from the turns above them." }));
      return;
    }
    for (const turn of turns) {
      const rewritten = turn.standalone_query && turn.standalone_query !== turn.query;
      list.append(
        el(
          "li",
          { class: "turn", "data-testid": "turn", dataset: { request: turn.request_id, status: turn.status } },
          el("button", {
            type: "button",
            class: "turn-query history-open",
            "data-testid": "turn-query",
            text: turn.query,
            title: `Replay ${turn.request_id} from its first event`,
            onclick: () => this.onOpen(turn.request_id, turn.query),
          }),
          rewritten ? el("p", { class: "understood", "data-testid": "turn-standalone" }, "understood as ", el("q", { text: turn.standalone_query })) : null,
          el(
            "p",
            { class: "turn-answer", "data-testid": "turn-answer" },
            turn.answer ? short(turn.answer, ANSWER_CHARS) : el("span", { class: `status s-${turn.status}`, text: turn.status }),
          ),
        ),
      );
    }
  }

  #start() {
    this.id = newId();
    sessionStorage.setItem(KEY, this.id);
    return this.id;
  }

  #showId() {
    $("#session-id").textContent = this.id;
  }
}
