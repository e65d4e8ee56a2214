// The "Other doors" panel: how an OpenAI client and an MCP client reach this API, the models
// the caller's namespaces make (GET /v1/models), and the tools its requests may use
// (GET /v1/tools), MCP servers' under their prefixes.

import * as api from "./api.js";
import { $, clear, el } from "./dom.js";

const MAX_DESCRIPTION = 140;

function snippet(text) {
  return el("pre", { class: "snippet" }, el("code", { text }));
}

function describe(text) {
  const line = (text || "").split("\n")[0].trim();
  return line.length > MAX_DESCRIPTION ? `${line.slice(0, MAX_DESCRIPTION - 1)}…` : line;
}

export class Connect {
  constructor() {
    this.box = $("#connect-body");
  }

  async refresh() {
    const origin = location.origin;
    const [models, tools] = await Promise.all([
      api.get("/v1/models").catch(() => ({ data: [] })),
      api.get("/v1/tools").catch(() => ({ tools: [] })),
    ]);
    clear(this.box);
    const names = (models.data || []).map((m) => m.id);
    this.box.append(
      el("h3", { text: "OpenAI clients" }),
      el("p", {
        text: "Any OpenAI SDK or chat front end (Open WebUI, LibreChat, LiteLLM): the base URL, your token as the API key, a model below.",
      }),
      snippet(`base_url = "${origin}/v1"\nmodel    = "${names[0] || "ragbus"}"`),
      el(
        "p",
        { class: "hint", dataset: { testid: "connect-models" } },
        `Models: ${names.length ? names.join(", ") : "ragbus"}`,
      ),
      el("h3", { text: "MCP clients" }),
      el("p", { text: "Streamable HTTP with the same bearer token, or stdio through `ragbus mcp`:" }),
      snippet(
        JSON.stringify(
          { mcpServers: { ragbus: { command: "ragbus", args: ["mcp", "--api", origin] } } },
          null,
          2,
        ),
      ),
      el("p", { class: "hint", dataset: { testid: "connect-mcp" }, text: `${origin}/mcp` }),
      el("h3", { text: "Tools your questions may use" }),
    );
    const listed = tools.tools || [];
    if (!listed.length) {
      this.box.append(el("p", { class: "empty", text: "No tool worker has published its tools yet." }));
      return;
    }
    const list = el("ul", { class: "tools", dataset: { testid: "connect-tools" } });
    for (const tool of listed) {
      list.append(
        el(
          "li",
          {},
          el("code", { text: tool.name }),
          el("span", { class: "muted", text: tool.server ? ` · MCP server ${tool.server}` : " · built in" }),
          el("span", { text: ` — ${describe(tool.description)}` }),
        ),
      );
    }
    this.box.append(list);
  }
}
