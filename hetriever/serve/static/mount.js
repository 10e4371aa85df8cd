/* hetriever's search box, part 3 of 3: where it is put. The page at `/` of `hetriever serve`
 * (`data-mode="page"`), and the widget a docs site loads with one script tag
 * (`<script src="https://search.example.org/widget.js" defer>`) beside an element marked
 * `data-hetriever-search`. */
/* `/` anywhere but in a text field. */
function onSlash(then) {
  document.addEventListener("keydown", function (event) {
    var target = event.target;
    var typing = target && (target.isContentEditable ||
      /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName));
    if (event.key === "/" && !typing && !event.ctrlKey && !event.metaKey) {
      event.preventDefault();
      then();
    }
  });
}

/* The widget: a button on the docs site that opens the search in a modal dialog. A docs
 * site built for one version names it (`data-version="v0.139.0"`): its readers search that
 * version first, and may pick another in the dialog (the list is asked for on first open). */
function mountWidget(host, options) {
  var open = el("button", { type: "button", class: "htr-open",
    "aria-haspopup": "dialog" }, [el("span", { text: "Search docs" }),
    el("kbd", { "aria-hidden": "true", text: "/" })]);
  var dialog = el("dialog", { class: "htr-dialog", "aria-label": "Search the documentation" });
  var close = el("button", { type: "button", class: "htr-close", text: "Close" });
  var inner = el("div", { class: "htr-dialog-body" });
  dialog.appendChild(close);
  dialog.appendChild(inner);
  host.appendChild(open);
  host.appendChild(dialog);
  var search = new Search(inner, { api: options.api, key: options.key, widget: true,
    version: options.version });
  function show() {
    if (!search.versionsShown) search.loadVersions();
    if (!dialog.open) dialog.showModal();
    search.input.focus();
    search.input.select();
  }
  open.addEventListener("click", show);
  close.addEventListener("click", function () { dialog.close(); open.focus(); });
  dialog.addEventListener("click", function (event) { if (event.target === dialog) dialog.close(); });
  onSlash(show);
  return search;
}

/* The page's address keeps the search (`/?q=where&section=docs`): a search can be linked. */
function keepInAddress(search) {
  var given = new URLSearchParams(location.search);
  ["repository", "section", "lang", "version"].forEach(function (name) {
    if (given.get(name)) search.state[name] = given.get(name);
  });
  if (given.get("q")) {
    search.input.value = search.state.q = given.get("q");
    search.schedule(0);
  }
  var run = search.run;
  search.run = function () {
    var params = new URLSearchParams();
    Object.keys(search.state).forEach(function (name) {
      if (search.state[name]) params.set(name, search.state[name]);
    });
    var query = params.toString();
    history.replaceState(null, "", location.pathname + (query ? "?" + query : ""));
    run.call(search);
  };
}

function mountPage(host, options) {
  var search = new Search(host, { api: options.api, key: options.key, widget: false,
    version: options.version });
  keepInAddress(search);
  search.loadVersions();
  onSlash(function () { search.input.focus(); search.input.select(); });
  search.input.focus();
  return search;
}

function addStylesheet() {
  var href = SERVER + "/web/search.css";
  if (document.querySelector('link[href="' + href + '"]')) return;
  document.head.appendChild(el("link", { rel: "stylesheet", href: href }));
}

function mountAll() {
  document.querySelectorAll("[data-hetriever-search]").forEach(function (host) {
    if (host.dataset.hetrieverMounted) return;
    host.dataset.hetrieverMounted = "1";
    var api = safeLink(host.dataset.hetrieverSearch, false) ? host.dataset.hetrieverSearch
      : SERVER;
    var options = { api: api, key: host.dataset.apiKey || "",
      version: (host.dataset.version || "").trim() || null };
    if (host.dataset.mode === "page") mountPage(host, options);
    else { addStylesheet(); mountWidget(host, options); }
  });
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", mountAll);
else mountAll();
