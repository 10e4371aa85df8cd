/* hetriever's search box, part 2 of 3: one search (box, key, versions, results, facets)
 * over `/search` of the server at `options.api`. */
function Search(root, options) {
  this.root = root;
  this.api = options.api.replace(/\/+$/, "");
  this.operatorKey = options.key || "";
  this.widget = !!options.widget;
  this.state = { q: "", repository: null, section: null, lang: null,
    version: options.version || null };
  this.timer = this.inflight = this.lastAnswer = null;
  this.build();
}

Search.prototype.key = function () {
  var own = "";
  try { own = sessionStorage.getItem(KEY_STORE) || ""; } catch (e) { /* storage off */ }
  return own || this.operatorKey;
};

Search.prototype.build = function () {
  var self = this;
  var id = "htr-" + Math.random().toString(36).slice(2, 8);
  this.input = el("input", {
    id: id + "-q", type: "search", autocomplete: "off", spellcheck: "false",
    placeholder: "Ask a question or type words", "aria-describedby": id + "-help",
    "aria-controls": id + "-results", enterkeyhint: "search",
  });
  this.status = el("p", { class: "htr-status", role: "status", "aria-live": "polite" });
  // Versions: "current" (the checked-out docs) and each indexed version the caller may
  // see; shown only where there is one (`showVersions`, the page's own mode).
  this.versionPick = el("select", { id: id + "-version", class: "htr-version-pick" });
  this.versionRow = el("p", { class: "htr-version-row", hidden: "" }, [
    el("label", { for: id + "-version", text: "Version" }), this.versionPick]);
  this.versionPick.addEventListener("change", function () {
    self.state.version = self.versionPick.value || null;
    self.schedule(0);
  });
  var form = el("form", { class: "htr-form", role: "search" }, [
    el("label", { for: id + "-q", class: "htr-label", text: "Search the documentation" }),
    el("div", { class: "htr-box" }, [this.input]),
    this.versionRow,
    el("p", { id: id + "-help", class: "htr-help",
      text: "Press / to search, ↑ ↓ to move through the results, Enter to open one." }),
  ]);
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    self.openFirst();
  });

  this.keyInput = el("input", { id: id + "-key", type: "password", autocomplete: "off",
    class: "htr-key-input" });
  this.keyNote = el("span", { class: "htr-key-note", role: "status" });
  var save = el("button", { type: "button", class: "htr-button", text: "Use key" });
  var forget = el("button", { type: "button", class: "htr-button", text: "Forget key" });
  save.addEventListener("click", function () { self.setKey(self.keyInput.value.trim()); });
  forget.addEventListener("click", function () { self.setKey(""); });
  this.keyInput.addEventListener("keydown", function (event) {
    if (event.key === "Enter") { event.preventDefault(); save.click(); }
  });
  var keyPanel = el("details", { class: "htr-key" }, [
    el("summary", { text: "API key" }),
    el("label", { for: id + "-key", text: "API key (kept in this browser tab only)" }),
    el("div", { class: "htr-key-row" }, [this.keyInput, save, forget]),
    this.keyNote,
  ]);

  this.facets = el("nav", { class: "htr-facets", "aria-label": "Narrow the search" });
  this.results = el("ol", { id: id + "-results", class: "htr-results",
    "aria-label": "Results" });
  this.message = el("div", { class: "htr-message" });
  var body = el("div", { class: "htr-body" }, [
    this.facets,
    el("div", { class: "htr-main" }, [this.status, this.message, this.results]),
  ]);
  this.root.classList.add("htr");
  this.root.appendChild(form);
  this.root.appendChild(keyPanel);
  this.root.appendChild(body);
  this.showKeyNote();
  this.showHint();

  this.input.addEventListener("input", function () {
    self.state.q = self.input.value;
    self.schedule();
  });
  this.input.addEventListener("keydown", function (event) {
    if (event.key === "ArrowDown") { event.preventDefault(); self.focusResult(0); }
    if (event.key === "Escape" && self.input.value) {
      event.preventDefault();
      event.stopPropagation();
      self.input.value = "";
      self.state.q = "";
      self.schedule();
    }
  });
  this.results.addEventListener("keydown", function (event) {
    var links = self.links();
    var at = links.indexOf(document.activeElement);
    if (at < 0) return;
    if (event.key === "ArrowDown") { event.preventDefault(); self.focusResult(at + 1); }
    if (event.key === "ArrowUp") {
      event.preventDefault();
      if (at === 0) self.input.focus(); else self.focusResult(at - 1);
    }
  });
  this.results.addEventListener("click", function (event) {
    var link = event.target.closest ? event.target.closest("a.htr-title") : null;
    if (link) self.opened(link);
  });
};

Search.prototype.links = function () {
  return Array.from(this.results.querySelectorAll("a.htr-title"));
};

Search.prototype.focusResult = function (index) {
  var links = this.links();
  if (links.length) links[Math.min(index, links.length - 1)].focus();
};

Search.prototype.openFirst = function () {
  var first = this.links()[0];
  if (first) first.click();
};

Search.prototype.setKey = function (key) {
  try {
    if (key) sessionStorage.setItem(KEY_STORE, key); else sessionStorage.removeItem(KEY_STORE);
  } catch (e) { /* storage off: the key lasts as long as the page */ }
  if (!key) this.keyInput.value = "";
  this.showKeyNote();
  if (this.versionsShown) this.loadVersions();  // another key may see other versions
  this.schedule(0);
};

Search.prototype.showKeyNote = function () {
  var own = false;
  try { own = !!sessionStorage.getItem(KEY_STORE); } catch (e) { /* storage off */ }
  this.keyNote.textContent = own ? "Searching with your key."
    : this.operatorKey ? "Searching with this site's key."
      : "No key: public pages only.";
};

/* The versions the caller's key may see, from `/repositories` (each version's `version`
 * label); a label several repositories have is one choice. */
Search.prototype.loadVersions = function () {
  var self = this;
  var key = this.key();
  var asked = this.versionsAsked = (this.versionsAsked || 0) + 1;  // a later key's list wins
  this.versionsShown = true;
  fetch(this.api + "/repositories", {
    headers: key ? { Authorization: "Bearer " + key } : {}, credentials: "omit",
  }).then(function (response) {
    return response.ok ? response.json() : {};
  }).then(function (body) {
    if (asked !== self.versionsAsked) return;
    var rows = Array.isArray(body.repositories) ? body.repositories : [];
    var labels = Array.from(new Set(rows.map(function (r) { return String(r.version || ""); })
      .filter(Boolean))).sort(function (a, b) {  // v0.10.0 before v0.9.0
      return b.localeCompare(a, undefined, { numeric: true });
    });
    self.showVersions(labels);
  }, function () { if (asked === self.versionsAsked) self.showVersions([]); });
};

Search.prototype.showVersions = function (labels) {
  var chosen = this.state.version;
  if (chosen && labels.indexOf(chosen) < 0) labels = [chosen].concat(labels);  // the address's
  this.versionPick.replaceChildren(el("option", { value: "", text: "current" }));
  labels.forEach(function (label) {
    this.versionPick.appendChild(el("option", { value: label, text: label }));
  }, this);
  this.versionPick.value = chosen || "";
  this.versionRow.hidden = !labels.length;
};

Search.prototype.schedule = function (delay) {
  var self = this;
  clearTimeout(this.timer);
  this.timer = setTimeout(function () { self.run(); }, delay === undefined ? DEBOUNCE_MS : delay);
};

Search.prototype.params = function () {
  var params = new URLSearchParams({ q: this.state.q.trim(), k: String(PAGE_SIZE),
    group: "page" });
  if (this.state.repository) params.append("repository", this.state.repository);
  if (this.state.lang) params.set("lang", this.state.lang);
  if (this.state.version) params.set("version", this.state.version);
  if (this.state.section) params.set("filter", JSON.stringify({ section: this.state.section }));
  return params;
};

Search.prototype.run = function () {
  var self = this;
  if (this.inflight) this.inflight.abort();
  if (!this.state.q.trim()) {
    this.inflight = null;
    this.clear();
    this.showHint();
    return;
  }
  var controller = new AbortController();
  this.inflight = controller;
  this.root.setAttribute("aria-busy", "true");
  var key = this.key();
  fetch(this.api + "/search?" + this.params(), {
    headers: key ? { Authorization: "Bearer " + key } : {}, signal: controller.signal,
    credentials: "omit",
  }).then(function (response) {
    return response.json().catch(function () { return {}; }).then(function (body) {
      return { status: response.status, body: body };
    });
  }).then(function (answer) {
    if (controller !== self.inflight) return;
    self.root.removeAttribute("aria-busy");
    if (answer.status === 200) self.show(answer.body);
    else self.failed(answer.status, answer.body && answer.body.error);
  }, function (error) {
    if (error && error.name === "AbortError") return;
    if (controller !== self.inflight) return;
    self.root.removeAttribute("aria-busy");
    self.failed(0, "");
  });
};

Search.prototype.clear = function () {
  this.results.replaceChildren();
  this.facets.replaceChildren();
  this.message.replaceChildren();
  this.status.textContent = "";
  this.root.removeAttribute("data-state");
  this.root.removeAttribute("data-query");
};

Search.prototype.showHint = function () {
  this.root.setAttribute("data-state", "idle");
  this.message.replaceChildren(el("p", { class: "htr-hint",
    text: "Type a question or a few words: results appear as you type." }));
};

Search.prototype.failed = function (status, error) {
  this.clear();
  this.root.setAttribute("data-state", "error");
  var what;
  if (status === 401) {
    what = ["The API key was refused.", "Check it under “API key”, or choose “Forget key” " +
      "to search the public pages."];
  } else if (status === 400) {
    what = ["The search could not be run: " + (error || "a malformed request") + ".",
      "Change the words or remove a filter."];
  } else if (status === 503 || status === 429) {
    what = ["The search server is busy or its index is unavailable.",
      "Try again in a moment."];
  } else if (status === 0) {
    what = ["The search server at " + this.api + " could not be reached.",
      "Check that `hetriever serve` is running" + (location.origin === this.api ? "." :
        ", and that it lists " + location.origin + " in HETRIEVER_CORS_ORIGINS.")];
  } else {
    what = ["The search failed (HTTP " + status + ").", "Try again; if it persists, " +
      "the server's log says why."];
  }
  this.message.replaceChildren(el("div", { class: "htr-error", role: "alert" }, [
    el("p", { class: "htr-error-title", text: what[0] }), el("p", { text: what[1] })]));
};

Search.prototype.show = function (answer) {
  var self = this;
  this.clear();
  this.lastAnswer = answer;
  var pattern = termsPattern(answer.query || this.state.q);
  var results = Array.isArray(answer.results) ? answer.results : [];
  var took = typeof answer.search_ms === "number" ? answer.search_ms : answer.took_ms;
  this.status.textContent = results.length + (results.length === 1 ? " page" : " pages") +
    " in " + Math.round(took || 0) + " ms";
  this.renderFacets(answer.facets || {});
  if (!results.length) {
    this.root.setAttribute("data-state", "empty");
    this.root.setAttribute("data-query", String(answer.query || ""));
    var narrowed = this.state.repository || this.state.section || this.state.lang;
    this.message.replaceChildren(el("div", { class: "htr-empty" }, [
      el("p", { class: "htr-empty-title", text: "No pages match “" + answer.query + "”." }),
      el("p", { text: narrowed ? "Remove a filter on the left, or try other words."
        : "Try fewer or other words, or a page's title." })]));
    return;
  }
  this.root.setAttribute("data-state", "results");
  this.root.setAttribute("data-query", String(answer.query || ""));
  results.forEach(function (result, index) {
    self.results.appendChild(self.renderResult(result, index, pattern));
  });
};

Search.prototype.renderResult = function (result, index, pattern) {
  var href = safeLink(result.heading_link || result.link, this.widget);
  var title = String(result.title || result.url || "untitled");
  var titleNode = href
    ? el("a", { class: "htr-title", href: href, "data-rank": String(index + 1) })
    : el("span", { class: "htr-title htr-nolink" });
  titleNode.appendChild(highlighted(title, pattern));
  var path = [String(result.repository || "")];
  if (result.section) path.push(String(result.section));
  String(result.heading || "").split(" > ").forEach(function (h) { if (h.trim()) path.push(h); });
  var crumbs = el("p", { class: "htr-path" });
  if (result.version) crumbs.appendChild(el("span", { class: "htr-version",
    text: String(result.version) }));
  path.forEach(function (part, i) {
    if (i) crumbs.appendChild(el("span", { class: "htr-sep", "aria-hidden": "true", text: "›" }));
    crumbs.appendChild(el("span", { text: part }));
  });
  var passage = el("p", { class: "htr-passage" });
  passage.appendChild(highlighted(excerpt(result.passage, pattern), pattern));
  var item = el("li", { class: "htr-result" }, [el("h3", {}, [titleNode]), crumbs, passage]);
  if (href) item.appendChild(el("p", { class: "htr-url", text: href }));
  return item;
};

Search.prototype.renderFacets = function (facets) {
  var self = this;
  FACETS.forEach(function (pair) {
    var name = pair[0];
    var values = Array.isArray(facets[name]) ? facets[name] : [];
    var chosen = self.state[name];
    if (chosen && !values.some(function (v) { return v.value === chosen; })) {
      values = [{ value: chosen, count: 0 }].concat(values);
    }
    if (!values.length) return;
    var list = el("ul", { class: "htr-facet-values" });
    values.forEach(function (v) {
      var on = chosen === v.value;
      var button = el("button", { type: "button", class: "htr-facet", "aria-pressed": String(on),
        "data-facet": name, "data-value": String(v.value) }, [
        el("span", { class: "htr-facet-name", text: String(v.value) }),
        el("span", { class: "htr-count", text: String(v.count) }),
      ]);
      button.setAttribute("aria-label", v.value + ", " + v.count + " pages" +
        (on ? ", selected: press to remove" : ""));
      button.addEventListener("click", function () {
        self.state[name] = on ? null : String(v.value);
        self.schedule(0);
      });
      list.appendChild(el("li", {}, [button]));
    });
    self.facets.appendChild(el("section", { class: "htr-facet-group" }, [
      el("h2", { text: pair[1] }), list]));
  });
};

/* The analytics contract: an answer carrying `query_id` is told which result was opened. */
Search.prototype.opened = function (link) {
  var answer = this.lastAnswer;
  if (!answer || answer.query_id === undefined || answer.query_id === null) return;
  var body = JSON.stringify({ query_id: answer.query_id, rank: Number(link.dataset.rank),
    url: link.href });
  var target = this.api + "/analytics/open";
  var key = this.key();
  // sendBeacon sends no headers of its own and its JSON would need a preflight across
  // origins: it is used from the server's own page without a key, fetch keepalive otherwise.
  if (!key && this.api === location.origin && navigator.sendBeacon &&
      navigator.sendBeacon(target, new Blob([body], { type: "application/json" }))) return;
  var headers = { "Content-Type": "application/json" };
  if (key) headers.Authorization = "Bearer " + key;
  fetch(target, { method: "POST", body: body, headers: headers, keepalive: true,
    credentials: "omit" }).catch(function () { /* a lost beacon is not the reader's problem */ });
};
