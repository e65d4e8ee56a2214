// Following an SSE stream with the browser's EventSource.
//
// A dropped connection is resumed by EventSource itself, which sends the last `id` it saw as
// Last-Event-ID (the API's ids are JetStream sequences: `<seq>`, or `<seq>.<part>` for one of
// several phase events stored in one message). The follower still applies each event once: an
// event whose (seq, part) is not above the last one applied is ignored, so a server that
// replays a little too much never duplicates a token.

export class Follower {
  /**
   * @param {string} url
   * @param {string[]} names SSE event names to listen for
   * @param {object} handlers onEvent(name, data, seq), onIgnored(count, seq), onResume(count),
   *   onState(state), onFail()
   */
  constructor(url, names, handlers) {
    this.url = url;
    this.handlers = handlers;
    this.lastSeq = 0;
    this.lastPart = 0;
    this.opens = 0;
    this.resumes = 0;
    this.ignored = 0;
    this.closed = false;
    this.source = new EventSource(url);
    this.source.addEventListener("open", () => this.#opened());
    for (const name of names) {
      if (name === "error") continue; // shares its name with connection errors: below
      this.source.addEventListener(name, (event) => this.#message(name, event));
    }
    this.source.addEventListener("error", (event) => {
      if (event instanceof MessageEvent) this.#message("error", event);
      else this.#failed();
    });
  }

  close() {
    this.closed = true;
    this.source.close();
  }

  #opened() {
    if (this.closed) return;
    this.opens += 1;
    if (this.opens > 1) {
      this.resumes += 1;
      this.handlers.onResume?.(this.resumes, this.lastSeq);
    }
    this.#state("live");
  }

  #failed() {
    if (this.closed) return;
    if (this.source.readyState === EventSource.CLOSED) {
      this.closed = true;
      this.#state("failed");
      this.handlers.onFail?.();
    } else {
      this.#state("reconnecting");
    }
  }

  #message(name, event) {
    if (this.closed) return;
    let data;
    try {
      data = JSON.parse(event.data);
    } catch {
      this.handlers.onBadData?.(name, event.data);
      return;
    }
    const [idSeq, idPart] = String(event.lastEventId ?? "").split(".");
    const fromId = Number.parseInt(idSeq, 10);
    const seq = Number.isInteger(data?.seq) ? data.seq : Number.isInteger(fromId) ? fromId : 0;
    const fromPart = Number.parseInt(idPart, 10);
    const part = Number.isInteger(data?.part) ? data.part : Number.isInteger(fromPart) ? fromPart : 0;
    if (seq > 0 && (seq < this.lastSeq || (seq === this.lastSeq && part <= this.lastPart))) {
      this.ignored += 1;
      this.handlers.onIgnored?.(this.ignored, seq, name);
      return;
    }
    if (seq > 0) {
      this.lastSeq = seq;
      this.lastPart = part;
    }
    this.handlers.onEvent(name, data, seq);
  }

  #state(state) {
    this.handlers.onState?.(state);
  }
}
