/* hetriever's search box, part 1 of 3: constants and the text helpers. `/widget.js` is this
 * file, `search.js` and `mount.js` joined in that order inside one function
 * (`hetriever/serve/web.py`), so the three share these names and nothing leaks into the page.
 *
 * Every piece of text from the docs (titles, headings, passages) is put in the page as text
 * nodes, highlighting included (text split into text nodes and <mark> elements); nothing is
 * parsed as HTML, and a result links only to an http(s) address.
 */
var script = document.currentScript;
var SERVER = script ? new URL(script.src, location.href).origin : location.origin;
var KEY_STORE = "hetriever-api-key";
var DEBOUNCE_MS = 150;
var PAGE_SIZE = 10;
var EXCERPT_CHARS = 280;
// Words not worth a mark ("where" is kept: it names a Hugo function as often as it asks).
var STOP_WORDS = new Set(("a an and are as at be by can do does for from how i in is it of " +
  "on or the to what when which why with you").split(" "));
var FACETS = [["repository", "Repository"], ["section", "Section"], ["lang", "Language"]];

function el(tag, attrs, children) {
  var node = document.createElement(tag);
  Object.keys(attrs || {}).forEach(function (name) {
    if (name === "text") node.textContent = attrs[name];
    else node.setAttribute(name, attrs[name]);
  });
  (children || []).forEach(function (child) {
    node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
  });
  return node;
}

/* The query's words as a regular expression matching words that start with them
 * ("templates" marks "template", "templating"). */
function termsPattern(query) {
  var words = (query.toLowerCase().match(/[\p{L}\p{N}_]+/gu) || []).filter(function (w) {
    return w.length > 1 && !STOP_WORDS.has(w);
  });
  var stems = Array.from(new Set(words.map(function (w) {
    return w.length > 4 ? w.replace(/(ing|es|ed|s)$/u, "") : w;
  })));
  if (!stems.length) return null;
  stems.sort(function (a, b) { return b.length - a.length; });
  var escaped = stems.map(function (s) { return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"); });
  return new RegExp("(?<![\\p{L}\\p{N}_])(?:" + escaped.join("|") + ")[\\p{L}\\p{N}_]*", "giu");
}

/* `text` as text nodes and <mark>s: never parsed as HTML. */
function highlighted(text, pattern) {
  var out = document.createDocumentFragment();
  if (!pattern) {
    out.appendChild(document.createTextNode(text));
    return out;
  }
  var last = 0;
  pattern.lastIndex = 0;
  var match;
  while ((match = pattern.exec(text)) !== null) {
    if (match.index > last) out.appendChild(document.createTextNode(text.slice(last, match.index)));
    out.appendChild(el("mark", { text: match[0] }));
    last = match.index + match[0].length;
    if (!match[0].length) pattern.lastIndex++;
  }
  if (last < text.length) out.appendChild(document.createTextNode(text.slice(last)));
  return out;
}

/* A window of the passage around its first matching word, whitespace folded. */
function excerpt(text, pattern) {
  var flat = String(text || "").replace(/\s+/g, " ").trim();
  if (flat.length <= EXCERPT_CHARS) return flat;
  var at = 0;
  if (pattern) {
    pattern.lastIndex = 0;
    var found = pattern.exec(flat);
    if (found) at = Math.max(0, found.index - 60);
  }
  if (at > 0) {
    var space = flat.indexOf(" ", at);
    at = space > 0 && space < at + 20 ? space + 1 : at;
  }
  var end = Math.min(flat.length, at + EXCERPT_CHARS);
  var cut = flat.slice(at, end);
  if (end < flat.length) cut = cut.replace(/\s\S*$/, "") + " …";
  return (at > 0 ? "… " : "") + cut;
}

/* An address a result may link to: http(s) only; a site-relative path only on the docs
 * site itself (the widget), where it means that site's page. */
function safeLink(href, relativeOk) {
  if (typeof href !== "string" || !href) return null;
  var base = relativeOk && href.charAt(0) === "/" && href.charAt(1) !== "/" ? location.href
    : undefined;
  try {
    var url = base ? new URL(href, base) : new URL(href);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch (e) {
    return null;
  }
}
