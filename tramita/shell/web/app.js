/* tramita web chat: plain JavaScript, no build step, nothing loaded from elsewhere.
 *
 * One conversation per thread id. A message goes to POST /threads/{id}/stream (server-sent events:
 * progress, token, final | error); the final event carries the answer and the state to show: the
 * transaction being collected, the confirmation summary, the retrieved contexts behind each citation
 * and the trace. Confirm / Cancel send the same words a user would type ("sim"/"não", "yes"/"no"),
 * so the confirmation rules (explicit reply, hash of the arguments shown) apply unchanged.
 * Text from users and data is only ever set as textContent, never parsed as HTML.
 */
"use strict";

(() => {
  const STRINGS = {
    pt: {
      skip: "Ir para a mensagem", tagline: "transações e perguntas", user: "Usuário", pickUser: "Escolha…",
      signedInAs: "Conectado como", language: "Idioma", langAuto: "Automático", newThread: "Nova conversa",
      threads: "Conversas", conversation: "Conversa", message: "Mensagem", send: "Enviar",
      placeholder: "Escreva sua mensagem…", hint: "Enter envia · Shift+Enter quebra a linha",
      introText: "Pergunte sobre políticas, despesas, plantões e equipes, ou peça uma ação (aprovar uma despesa, abrir um chamado). Toda ação é confirmada antes de ser executada.",
      you: "Você", assistant: "tramita", thinking: "Pensando…", working: "Trabalhando", noUser: "Escolha um usuário antes de enviar.",
      collecting: "Coletando dados para", filled: "preenchido", pending: "pendente", confirmTitle: "Confirmar ação",
      confirm: "Confirmar", cancel: "Cancelar", details: "Detalhes", path: "Caminho", route: "Rota",
      llmCalls: "Chamadas ao LLM", tokens: "Tokens (prompt + resposta)", llmSeconds: "Tempo no LLM",
      seconds: "Tempo total", plan: "Fontes consultadas", executed: "Ação executada", refused: "Recusa",
      errors: "Erros", source: "Fonte", close: "Fechar", query: "Consulta", rows: "Linhas", noRows: "(nenhuma linha)",
      noSource: "O trecho citado não está disponível nesta visualização.", error: "Erro", emptyThreads: "Nenhuma conversa ainda",
      answered: "Resposta", sent: "Enviado", untitled: "Nova conversa", confirmed: "Resposta enviada:",
      words: { yes: "sim", no: "não" },
    },
    en: {
      skip: "Skip to the message box", tagline: "transactions and questions", user: "User", pickUser: "Choose…",
      signedInAs: "Signed in as", language: "Language", langAuto: "Automatic", newThread: "New conversation",
      threads: "Conversations", conversation: "Conversation", message: "Message", send: "Send",
      placeholder: "Write your message…", hint: "Enter sends · Shift+Enter adds a line",
      introText: "Ask about policies, expenses, on-call rotations and teams, or ask for an action (approve an expense, open a ticket). Every action is confirmed before it runs.",
      you: "You", assistant: "tramita", thinking: "Thinking…", working: "Working", noUser: "Choose a user before sending.",
      collecting: "Collecting details for", filled: "filled", pending: "pending", confirmTitle: "Confirm action",
      confirm: "Confirm", cancel: "Cancel", details: "Details", path: "Path", route: "Route",
      llmCalls: "LLM calls", tokens: "Tokens (prompt + completion)", llmSeconds: "Time in the LLM",
      seconds: "Total time", plan: "Sources consulted", executed: "Action executed", refused: "Refusal",
      errors: "Errors", source: "Source", close: "Close", query: "Query", rows: "Rows", noRows: "(no rows)",
      noSource: "The cited passage is not available in this view.", error: "Error", emptyThreads: "No conversations yet",
      answered: "Answer", sent: "Sent", untitled: "New conversation", confirmed: "Reply sent:",
      words: { yes: "yes", no: "no" },
    },
  };
  const CITATION = /\[(doc-[\w.-]+|SQL|sql|graph|api:[\w.-]+)\]/g;
  const STORE_KEY = "tramita.threads.v1";

  const $ = (sel) => document.querySelector(sel);
  const state = {
    user: "", fixedUser: false, threadId: "", busy: false, seq: 0,
    threads: loadThreads(),
  };

  // ------------------------------------------------------------------ small helpers
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) if (c !== null && c !== undefined) node.append(c);
    return node;
  }

  function uiLang() {
    const chosen = $("#lang").value;
    if (chosen === "pt" || chosen === "en") return chosen;
    return (navigator.language || "pt").toLowerCase().startsWith("pt") ? "pt" : "en";
  }
  const t = (key) => STRINGS[uiLang()][key] ?? STRINGS.pt[key] ?? key;

  function applyStrings() {
    document.documentElement.lang = uiLang() === "pt" ? "pt-BR" : "en";
    for (const node of document.querySelectorAll("[data-i18n]")) node.textContent = t(node.dataset.i18n);
    for (const node of document.querySelectorAll("[data-i18n-placeholder]")) node.placeholder = t(node.dataset.i18nPlaceholder);
    renderThreadList();
  }

  function newThreadId() {
    const bytes = new Uint8Array(8);
    crypto.getRandomValues(bytes);
    return "web-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function loadThreads() {
    try { return JSON.parse(localStorage.getItem(STORE_KEY) || "[]"); } catch { return []; }
  }
  function saveThreads() {
    try { localStorage.setItem(STORE_KEY, JSON.stringify(state.threads.slice(0, 50))); } catch { /* private mode */ }
  }

  function announce(text) {
    const node = $("#announcer");
    node.textContent = "";
    window.setTimeout(() => { node.textContent = text; }, 50);
  }
  function setStatus(text) { $("#status").textContent = text || ""; }

  async function getJSON(url) {
    const res = await fetch(url, { headers: { accept: "application/json" } });
    const body = await res.json().catch(() => ({}));
    if (!res.ok) throw new Error(body.error || `HTTP ${res.status}`);
    return body;
  }

  // ------------------------------------------------------------------ threads
  function threadsOfUser() { return state.threads.filter((th) => th.user === state.user); }

  function renderThreadList() {
    const list = $("#thread-list");
    list.replaceChildren();
    const mine = threadsOfUser();
    if (!mine.length) {
      list.append(el("li", { class: "muted", text: t("emptyThreads") }));
      return;
    }
    for (const th of mine) {
      const current = th.id === state.threadId;
      list.append(el("li", {},
        el("button", {
          type: "button", class: "thread" + (current ? " current" : ""), "aria-current": current ? "true" : null,
          title: th.id, onclick: () => openThread(th.id),
        }, th.title || t("untitled"))));
    }
  }

  function startThread() {
    state.threadId = newThreadId();
    $("#turns").replaceChildren();
    $("#intro").hidden = false;
    renderThreadList();
    setStatus("");
  }

  function touchThread(text) {
    let th = state.threads.find((x) => x.id === state.threadId);
    if (!th) {
      th = { id: state.threadId, user: state.user, title: text.slice(0, 60) };
      state.threads.unshift(th);
    }
    th.updated = Date.now();
    state.threads.sort((a, b) => (b.updated || 0) - (a.updated || 0));
    saveThreads();
    renderThreadList();
  }

  async function openThread(id) {
    if (state.busy) return;
    state.threadId = id;
    renderThreadList();
    $("#turns").replaceChildren();
    try {
      const st = await getJSON(`/threads/${encodeURIComponent(id)}/state`);
      const msgs = st.messages || [];
      let turn = null;
      for (const m of msgs) {
        const text = typeof m.content === "string" ? m.content : JSON.stringify(m.content);
        if (m.type === "human") {
          turn = addTurn(text);
        } else if (m.type === "ai" && turn) {
          showAnswer(turn, text, null);
          turn.bot.removeAttribute("aria-busy");
        }
      }
      $("#intro").hidden = msgs.length > 0;
      if (turn) showTransaction(turn, { status: st.status, transaction: st.transaction, lang: st.lang, answer: turn.answerText });
    } catch (err) {
      setStatus(`${t("error")}: ${err.message}`);
    }
    $("#message").focus();
  }

  // ------------------------------------------------------------------ rendering a turn
  function addTurn(text) {
    $("#intro").hidden = true;
    const id = ++state.seq;
    const answer = el("div", { class: "answer", id: `answer-${id}` });
    const progress = el("p", { class: "progress", text: t("thinking") });
    const bot = el("div", { class: "msg bot", "aria-busy": "true", "aria-labelledby": `who-${id}` },
      el("span", { class: "who", id: `who-${id}`, text: t("assistant") }), progress, answer);
    const article = el("article", { class: "turn", "data-turn": id },
      el("div", { class: "msg user" }, el("span", { class: "who", text: t("you") }), el("p", { class: "text", text })),
      bot);
    $("#turns").append(article);
    article.scrollIntoView({ block: "end" });
    return { id, article, bot, answer, progress, answerText: "", result: null };
  }

  function citationTarget(tag) {
    if (tag.startsWith("doc-")) return { backend: "docs", doc: tag };
    if (tag.toLowerCase() === "sql") return { backend: "sql" };
    if (tag.startsWith("api:")) return { backend: "api", operation: tag.slice(4) };
    return { backend: tag };
  }

  function contextsFor(result, target) {
    const contexts = (result && result.contexts) || [];
    if (target.backend === "docs") {
      const items = [];
      for (const c of contexts) if (c.backend === "docs") for (const it of c.items || []) if (it.source === target.doc) items.push(it);
      return items;
    }
    return contexts.filter((c) => c.backend === target.backend && (!target.operation || c.operation === target.operation));
  }

  /** The answer as text nodes, each citation tag a link that opens its source in this turn. */
  function showAnswer(turn, text, result) {
    turn.answerText = text;
    turn.answer.replaceChildren();
    let last = 0;
    let n = 0;
    for (const m of text.matchAll(CITATION)) {
      turn.answer.append(document.createTextNode(text.slice(last, m.index)));
      const tag = m[1];
      const found = result ? contextsFor(result, citationTarget(tag)) : [];
      if (found.length) {
        const panelId = `src-${turn.id}-${++n}`;
        const link = el("a", {
          class: "cite", href: `#${panelId}`, "aria-controls": panelId, "aria-expanded": "false",
          "data-cite": tag, title: sourceTitle(tag, result),
        }, m[0]);
        link.addEventListener("click", (ev) => { ev.preventDefault(); toggleSource(turn, link, panelId, tag, found, result); });
        turn.answer.append(link);
      } else {
        turn.answer.append(el("span", { class: "cite plain", "data-cite": tag }, m[0]));
      }
      last = m.index + m[0].length;
    }
    turn.answer.append(document.createTextNode(text.slice(last)));
  }

  function sourceTitle(tag, result) {
    const titles = (result && result.titles) || {};
    return titles[tag] ? `${tag} — ${titles[tag]}` : tag;
  }

  function toggleSource(turn, link, panelId, tag, found, result) {
    const existing = document.getElementById(panelId);
    if (existing) {
      existing.remove();
      link.setAttribute("aria-expanded", "false");
      link.focus();
      return;
    }
    for (const other of turn.bot.querySelectorAll(".source-panel")) {
      const opener = turn.bot.querySelector(`[aria-controls="${other.id}"]`);
      if (opener) opener.setAttribute("aria-expanded", "false");
      other.remove();
    }
    const heading = el("h3", { id: `${panelId}-title` }, el("span", { class: "tag", text: `[${tag}]` }));
    const titles = (result && result.titles) || {};
    if (titles[tag]) heading.append(" ", titles[tag]);
    const close = el("button", { type: "button", class: "button small secondary", text: t("close") });
    const panel = el("section", { class: "source-panel", id: panelId, tabindex: "-1", "aria-labelledby": `${panelId}-title` },
      el("div", { class: "source-head" }, heading, close));
    if (tag.startsWith("doc-")) {
      for (const it of found) panel.append(el("blockquote", { class: "passage", text: it.text }));
    } else {
      for (const c of found) panel.append(...queryView(c));
    }
    close.addEventListener("click", () => { panel.remove(); link.setAttribute("aria-expanded", "false"); link.focus(); });
    panel.addEventListener("keydown", (ev) => { if (ev.key === "Escape") close.click(); });
    turn.answer.after(panel);
    link.setAttribute("aria-expanded", "true");
    panel.focus({ preventScroll: true });
    panel.scrollIntoView({ block: "start" });
  }

  function queryView(c) {
    const out = [];
    const query = c.query || (c.path ? `GET ${c.path} ${JSON.stringify(c.params || {})}` : "");
    if (query) out.push(el("p", { class: "label", text: t("query") }), el("pre", { class: "query" }, el("code", { text: query })));
    if (c.error) out.push(el("p", { class: "error", text: `${t("error")}: ${c.error}` }));
    const rows = c.rows || [];
    out.push(el("p", { class: "label", text: `${t("rows")} (${rows.length})` }));
    if (!rows.length) { out.push(el("p", { class: "muted", text: t("noRows") })); return out; }
    const cols = [];
    for (const r of rows) if (r && typeof r === "object") for (const k of Object.keys(r)) if (!cols.includes(k)) cols.push(k);
    const table = el("table", { class: "rows" },
      el("thead", {}, el("tr", {}, ...cols.map((k) => el("th", { scope: "col", text: k })))),
      el("tbody", {}, ...rows.map((r) => el("tr", {}, ...cols.map((k) => el("td", { text: cell(r[k]) }))))));
    out.push(el("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": t("rows") }, table));
    return out;
  }
  const cell = (v) => (v === null || v === undefined ? "" : typeof v === "object" ? JSON.stringify(v) : String(v));

  /** Collecting: which parameters are filled and which are pending. Awaiting: the confirmation card. */
  function showTransaction(turn, result) {
    for (const old of turn.bot.querySelectorAll(".tx, .confirm-card")) old.remove();
    turn.answer.hidden = false;
    const tx = result.transaction;
    if (!tx) return;
    if (result.status === "collecting") {
      const list = el("ul", { class: "params" });
      for (const [name, value] of Object.entries(tx.args || {})) {
        list.append(el("li", { class: "filled" }, el("span", { class: "mark", "aria-hidden": "true", text: "✓" }),
          el("span", { class: "name", text: name }), el("span", { class: "value", text: cell(value) }),
          el("span", { class: "sr-only", text: ` (${t("filled")})` })));
      }
      for (const name of tx.pending || []) {
        list.append(el("li", { class: "pending" }, el("span", { class: "mark", "aria-hidden": "true", text: "○" }),
          el("span", { class: "name", text: name }), el("span", { class: "value", text: t("pending") })));
      }
      turn.answer.after(el("section", { class: "tx", "aria-label": `${t("collecting")} ${tx.tool}` },
        el("p", { class: "tx-title" }, `${t("collecting")} `, el("code", { text: tx.tool })), list));
    } else if (result.status === "awaiting_confirmation") {
      const words = STRINGS[result.lang === "en" ? "en" : result.lang === "pt" ? "pt" : uiLang()].words;
      const titleId = `confirm-${turn.id}`;
      const yes = el("button", { type: "button", class: "button primary confirm", "data-reply": words.yes, text: t("confirm") });
      const no = el("button", { type: "button", class: "button secondary cancel", "data-reply": words.no, text: t("cancel") });
      const card = el("section", { class: "confirm-card", role: "group", "aria-labelledby": titleId },
        el("h3", { id: titleId, text: `${t("confirmTitle")}: ${tx.tool}` }),
        el("p", { class: "summary", text: result.answer || tx.summary || "" }),
        el("div", { class: "actions" }, yes, no));
      const reply = (word) => {
        for (const b of card.querySelectorAll("button")) b.disabled = true;
        (word === words.yes ? yes : no).classList.add("chosen");
        card.classList.add("answered");
        card.append(el("p", { class: "muted", text: `${t("confirmed")} “${word}”` }));
        send(word);
      };
      yes.addEventListener("click", () => reply(words.yes));
      no.addEventListener("click", () => reply(words.no));
      turn.answer.hidden = true; // the card shows the whole answer: summary and question
      turn.answer.after(card);
    }
  }

  function showDetails(turn, result) {
    const tr = result.trace || {};
    const rows = [
      [t("path"), (tr.nodes || []).join(" → ")],
      [t("route"), tr.route || ""],
      [t("llmCalls"), String(tr.llm_calls ?? 0)],
      [t("tokens"), `${tr.prompt_tokens ?? 0} + ${tr.completion_tokens ?? 0}`],
      [t("llmSeconds"), `${Number(tr.llm_seconds || 0).toFixed(2)} s`],
      [t("seconds"), `${Number(result.seconds || 0).toFixed(2)} s`],
    ];
    if (result.plan && result.plan.backends) rows.push([t("plan"), result.plan.backends.join(", ")]);
    if (tr.executed_tool) rows.push([t("executed"), tr.executed_tool]);
    if (tr.refused) rows.push([t("refused"), tr.refusal || ""]);
    if (tr.errors && tr.errors.length) rows.push([t("errors"), tr.errors.join("; ")]);
    const dl = el("dl", {});
    for (const [k, v] of rows) dl.append(el("dt", { text: k }), el("dd", { text: v }));
    turn.bot.append(el("details", { class: "details" }, el("summary", { text: t("details") }), dl));
  }

  // ------------------------------------------------------------------ sending
  function disableOldCards() {
    for (const b of document.querySelectorAll(".confirm-card:not(.answered) button")) b.disabled = true;
  }

  async function send(text) {
    text = text.trim();
    if (!text || state.busy) return;
    if (!state.user) {
      setStatus(t("noUser"));
      $("#user").focus();
      return;
    }
    state.busy = true;
    $("#send").disabled = true;
    disableOldCards();
    touchThread(text);
    const turn = addTurn(text);
    setStatus(t("thinking"));
    const nodes = [];
    try {
      await streamTurn(state.threadId, { text, user_id: state.user, language: $("#lang").value }, {
        progress(data) {
          nodes.push(...(data.nodes || []));
          turn.progress.textContent = `${t("working")}: ${nodes.join(" → ")}`;
        },
        token(data) {
          turn.answerText += data.text || "";
          turn.answer.textContent = turn.answerText;
        },
        final(result) {
          turn.result = result;
          turn.progress.remove();
          showAnswer(turn, result.answer || "", result);
          showTransaction(turn, result);
          showDetails(turn, result);
          turn.bot.removeAttribute("aria-busy");
          announce(result.answer || "");
        },
        error(data) { throw new Error(data.error || "error"); },
      });
    } catch (err) {
      turn.progress.remove();
      turn.bot.removeAttribute("aria-busy");
      turn.bot.classList.add("failed");
      turn.answer.replaceChildren(el("p", { class: "error", role: "alert", text: `${t("error")}: ${err.message}` }));
    } finally {
      state.busy = false;
      $("#send").disabled = false;
      setStatus("");
      turn.article.scrollIntoView({ block: "end" });
    }
  }

  async function streamTurn(threadId, body, handlers) {
    const res = await fetch(`/threads/${encodeURIComponent(threadId)}/stream`, {
      method: "POST", headers: { "content-type": "application/json", accept: "text/event-stream" },
      body: JSON.stringify(body),
    });
    if (!res.ok) {
      const j = await res.json().catch(() => ({}));
      throw new Error(j.error || `HTTP ${res.status}`);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let finished = false;
    const dispatch = (raw) => {
      let event = "message";
      const data = [];
      for (const line of raw.split("\n")) {
        if (line.startsWith(":")) continue;
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (!data.length || !handlers[event]) return;
      if (event === "final") finished = true;
      handlers[event](JSON.parse(data.join("\n")));
    };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        dispatch(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
      }
    }
    if (buffer.trim()) dispatch(buffer);
    if (!finished) throw new Error("the connection closed before the answer was complete");
  }

  // ------------------------------------------------------------------ start-up
  async function loadUsers() {
    const cfg = await getJSON("/api/config");
    if (cfg.trusted_user_header) {
      state.fixedUser = true;
      state.user = cfg.user;
      $("#user-picker").hidden = true;
      $("#user-fixed").hidden = false;
      $("#user-fixed-name").textContent = cfg.user;
      return;
    }
    const { users } = await getJSON("/api/users");
    const select = $("#user");
    for (const u of users) select.append(el("option", { value: u.id, text: `${u.id} — ${u.name}${u.role ? ` (${u.role})` : ""}` }));
    const saved = localStorage.getItem("tramita.user");
    if (saved && users.some((u) => u.id === saved)) { select.value = saved; state.user = saved; }
  }

  function wire() {
    $("#composer").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const box = $("#message");
      const text = box.value;
      if (!text.trim() || state.busy) return;
      box.value = "";
      send(text);
      box.focus();
    });
    $("#message").addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
        ev.preventDefault();
        $("#composer").requestSubmit();
      }
    });
    $("#user").addEventListener("change", (ev) => {
      state.user = ev.target.value;
      try { localStorage.setItem("tramita.user", state.user); } catch { /* private mode */ }
      startThread(); // a conversation belongs to one user: another user starts a new one
    });
    $("#lang").addEventListener("change", applyStrings);
    $("#new-thread").addEventListener("click", () => { if (!state.busy) { startThread(); $("#message").focus(); } });
    for (const b of document.querySelectorAll(".example")) {
      b.addEventListener("click", () => { const box = $("#message"); box.value = b.textContent; box.focus(); });
    }
  }

  document.addEventListener("DOMContentLoaded", async () => {
    wire();
    startThread();
    applyStrings();
    try {
      await loadUsers();
    } catch (err) {
      setStatus(`${t("error")}: ${err.message}`);
    }
    renderThreadList();
    document.body.dataset.ready = "true";
  });
})();
