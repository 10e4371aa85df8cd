"""Hugo page body -> ordered `Block`s: headings, paragraphs of plain text, fenced code kept intact.

Three passes, cheapest first:

1. fences: fenced code blocks are cut out first, so nothing below ever looks inside them
   (Hugo expands only shortcodes there: `param`/`_param` values and escaped examples);
2. shortcodes: only `{{<` and `{{%` start one (`{{ .Title }}` is Go-template text and stays);
   pairs are matched by name, not delimiter, so `{{% tab %}}...{{< /tab >}}` works;
3. Markdown and HTML, line by line with regular expressions; BeautifulSoup only runs on the
   paragraphs that hold a real HTML tag, because it costs ~100x a regex pass.

Inline code, escaped shortcodes and autolinks are swapped for private-use placeholders while the
markup passes run, so `<div>` in backticks or `*` in a glob survives as written.
Nothing here raises on bad markup: it degrades to text.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from bs4 import BeautifulSoup
from bs4.element import Comment, Declaration, Doctype, NavigableString, ProcessingInstruction

from hetriever.logs import get_logger
from hetriever.models import Block
from hetriever.parse import split_front_matter

log = get_logger(__name__)

IncludeResolver = Callable[[str], "str | None"]

MAX_INCLUDE_DEPTH = 3
# Over-cleaning check: pages with at least this many prose words outside code...
OVER_CLEANED_MIN_WORDS = 60
# ...should keep at least this share of it after cleaning.
OVER_CLEANED_RATIO = 0.30

# --- placeholders -------------------------------------------------------------------------

_PH_OPEN, _PH_CLOSE = "\ue000", "\ue001"
_PLACEHOLDER = re.compile("\ue000(\\d+)\ue001")


@dataclass
class _Context:
    params: Mapping[str, str]
    resolver: IncludeResolver | None
    path: str | None
    protected: list[str] = field(default_factory=list)
    chain: list[str] = field(default_factory=list)  # includes being expanded (recursion guard)
    pieces: list[tuple[str, str]] = field(default_factory=list)  # ("md"|"code", text)
    buffer: list[str] = field(default_factory=list)  # Markdown text not yet in `pieces`

    def protect(self, text: str) -> str:
        # Stored fully restored (inline code may wrap an escaped shortcode), so `restore` is
        # one pass and never rescans what it put back.
        self.protected.append(self.restore(text))
        return f"{_PH_OPEN}{len(self.protected) - 1}{_PH_CLOSE}"

    def restore(self, text: str) -> str:
        if _PH_OPEN not in text:
            return text
        return _PLACEHOLDER.sub(lambda m: self.protected[int(m.group(1))], text)

    def literal(self, text: str) -> str:
        """Source text for the buffer: a private-use character in it must not pose as a
        placeholder."""
        if _PH_OPEN in text:
            return text.replace(_PH_OPEN, self.protect(_PH_OPEN))
        return text

    def flush(self) -> None:
        if self.buffer:
            text = "".join(self.buffer)
            self.buffer.clear()
            if text.strip():
                self.pieces.append(("md", text))

    def code(self, text: str) -> None:
        self.flush()
        self.pieces.append(("code", text))


# --- pass 1: fenced code ------------------------------------------------------------------

_FENCE = re.compile(r"([ \t]*)(`{3,}|~{3,})(.*)")
_QUOTE_MARK = re.compile(r"[ \t]{0,3}>[ \t]?")


def _unquote(line: str, depth: int) -> str | None:
    """`line` without `depth` block-quote markers, or None when it has fewer."""
    pos = 0
    for _ in range(depth):
        m = _QUOTE_MARK.match(line, pos)
        if not m:
            return None
        pos = m.end()
    return line[pos:]


def _fence_open(line: str) -> tuple[int, str, int] | None:
    """(quote depth, fence char, fence length) if `line` opens a fenced code block."""
    depth = 0
    body = line
    if line.lstrip().startswith(">"):
        while True:
            m = _QUOTE_MARK.match(body)
            if not m:
                break
            depth += 1
            body = body[m.end():]
    m = _FENCE.fullmatch(body.rstrip("\n"))
    if not m:
        return None
    fence = m.group(2)
    if fence[0] == "`" and "`" in m.group(3):
        return None  # CommonMark: a backtick fence's info string holds no backtick
    return depth, fence[0], len(fence)


def split_fences(text: str) -> list[tuple[str, str]]:
    """Split Markdown into ("md", text) and ("code", fenced block) pieces, in order.

    A fence may be indented, in a block quote (its quote markers are dropped from the code), or
    never closed (then it runs to the end, as CommonMark renders it).
    """
    if "```" not in text and "~~~" not in text:
        return [("md", text)] if text else []
    lines = text.splitlines(keepends=True)
    out: list[tuple[str, str]] = []
    md_start = i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        if "```" not in line and "~~~" not in line:
            i += 1
            continue
        opened = _fence_open(line)
        if opened is None:
            i += 1
            continue
        depth, char, length = opened
        code = [_unquote(line, depth) or line if depth else line]
        j = i + 1
        while j < n:
            current = _unquote(lines[j], depth) if depth else lines[j]
            if current is None:
                break  # the block quote holding the fence ended
            code.append(current)
            j += 1
            stripped = current.strip()
            if stripped and stripped[0] == char and stripped.count(char) == len(stripped) \
                    and len(stripped) >= length:
                break
        if md_start < i:
            out.append(("md", "".join(lines[md_start:i])))
        block = "".join(code)
        out.append(("code", block[:-1] if block.endswith("\n") else block))
        i = md_start = j
    if md_start < n:
        out.append(("md", "".join(lines[md_start:])))
    return out


# --- pass 2: shortcodes -------------------------------------------------------------------

_SC_START = re.compile(r"\{\{([<%])")
_SC_ESCAPED = re.compile(r"\{\{([<%])\s*/\*(.*?)\*/\s*([>%])\}\}", re.S)
_SC_ARG = re.compile(r'\s*(?:([\w.-]+)\s*=\s*)?("(?:[^"\\]|\\.)*"|`[^`]*`|[^\s"`]+)')
_SC_MAX_LEN = 4000  # a call longer than this is taken for stray text
# In code, Hugo still expands shortcodes; only these two produce text we can know.
_CODE_SC = re.compile(
    r"\{\{([<%])\s*/\*(?P<esc>.*?)\*/\s*([>%])\}\}"
    r"|\{\{[<%]\s*_?param\s+(?P<q>\"?)(?P<name>[^\"\s%>]+)(?P=q)\s*[>%]\}\}",
    re.S)

_BLOCK_SHORTCODES = {"tab", "tabpane", "tabs", "alert", "details", "note", "warning", "callout",
                     "code-toggle", "highlight", "comment", "cards", "card"}
_CODE_SHORTCODES = {"code-toggle", "highlight"}
_MEDIA_SHORTCODES = {"img", "figure", "youtube", "vimeo", "instagram", "x", "tweet", "imgproc"}
_ALERT_TYPES = {"note", "tip", "important", "warning", "caution", "danger", "info"}


@dataclass
class _Call:
    name: str
    positional: list[str]
    named: dict[str, str]
    raw: str
    closing: bool = False
    self_closing: bool = False


_Token = tuple[str, object]  # ("text"|"code"|"esc", str) or ("call", _Call)


def _unquote_arg(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"`":
        inner = value[1:-1]
        return inner.replace('\\"', '"') if value[0] == '"' else inner
    return value


def _parse_call(inner: str, raw: str) -> _Call:
    text = inner.strip()
    if text.startswith("/"):
        parts = text[1:].strip().split(None, 1)
        return _Call(parts[0] if parts else "", [], {}, raw, closing=True)
    self_closing = text.endswith("/")
    if self_closing:
        text = text[:-1].rstrip()
    name, _, rest = text.partition(" ")
    if "\n" in name or "\t" in name:
        name, _, more = name.replace("\t", " ").replace("\n", " ").partition(" ")
        rest = more + " " + rest
    positional: list[str] = []
    named: dict[str, str] = {}
    for m in _SC_ARG.finditer(rest):
        value = _unquote_arg(m.group(2))
        if m.group(1):
            named[m.group(1)] = value
        else:
            positional.append(value)
    return _Call(name.strip(), positional, named, raw, self_closing=self_closing)


def _tokenize(text: str) -> list[_Token]:
    """Text, escaped shortcodes and shortcode calls of one non-code segment."""
    if "{{" not in text:
        return [("text", text)]
    tokens: list[_Token] = []
    pos = 0
    search_from = 0
    while True:
        m = _SC_START.search(text, search_from)
        if not m:
            break
        start = m.start()
        esc = _SC_ESCAPED.match(text, start)
        if esc and esc.group(1) == ("<" if esc.group(3) == ">" else "%") \
                and len(esc.group(0)) <= _SC_MAX_LEN:
            end = esc.end()
            token: _Token = ("esc", "{{" + esc.group(1) + esc.group(2) + esc.group(3) + "}}")
        else:
            closer = ">}}" if m.group(1) == "<" else "%}}"
            end = text.find(closer, start + 3)
            following = _SC_START.search(text, start + 3)
            if end < 0 or (following and following.start() < end) or end - start > _SC_MAX_LEN:
                search_from = start + 3  # unterminated: leave it as text
                continue
            end += 3
            token = ("call", _parse_call(text[start + 3:end - 3], text[start:end]))
        if start > pos:
            tokens.append(("text", text[pos:start]))
        tokens.append(token)
        pos = search_from = end
    if pos < len(text):
        tokens.append(("text", text[pos:]))
    return tokens


def _pair(tokens: list[_Token]) -> dict[int, int]:
    """Opening call index -> closing call index, matched by name (not delimiter).

    Opens left without a close are standalone calls; closes that match no open (an upstream
    typo such as `{{% /blocks/lead %}}` closing `blocks/section`) are dropped.
    """
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for index, (kind, value) in enumerate(tokens):
        if kind != "call":
            continue
        call = value
        assert isinstance(call, _Call)
        if call.closing:
            for k in range(len(stack) - 1, -1, -1):
                opener = tokens[stack[k]][1]
                assert isinstance(opener, _Call)
                if opener.name == call.name:
                    pairs[stack[k]] = index
                    del stack[k:]
                    break
        elif not call.self_closing:
            stack.append(index)
    return pairs


def _param(ctx: _Context, name: str) -> str:
    value = ctx.params.get(name)
    if value is None:
        value = ctx.params.get(name.lower())
    return str(value) if value is not None else name


def _expand_code(text: str, ctx: _Context) -> str:
    """Shortcodes inside code: escaped ones become literal, `param` its value, others stay."""
    if "{{" not in text:
        return text

    def sub(m: re.Match[str]) -> str:
        if m.group("name") is not None:
            return _param(ctx, m.group("name"))
        if m.group(1) != ("<" if m.group(3) == ">" else "%"):
            return m.group(0)
        return "{{" + m.group(1) + m.group("esc") + m.group(3) + "}}"

    return _CODE_SC.sub(sub, text)


def _version(value: str) -> str:
    value = value.strip()
    return value if value[:1] in ("v", "V") or not value else "v" + value


def _guess_config_lang(text: str) -> str:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")) and not stripped.startswith("[["):
        if stripped.startswith("{") or stripped.startswith('["'):
            return "json"
    for line in stripped.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") or re.match(r"[\w.\"'-]+\s*=", line):
            return "toml"
        return "yaml"
    return ""


def _code_from_call(call: _Call, inner: str, ctx: _Context) -> str:
    """A `code-toggle`/`highlight` pair's raw inner text as a fenced block, marked as code."""
    body = _expand_code(inner, ctx).strip("\n")
    if call.name == "highlight":
        lang = call.positional[0] if call.positional else ""
    else:
        lang = call.named.get("lang") or _guess_config_lang(body)
    info = lang
    if call.named.get("file"):
        info = f'{lang} {{file="{call.named["file"]}"}}'.strip()
    fence = "```"
    while fence in body:
        fence += "`"
    return f"{fence}{info}\n{body}\n{fence}"


def _include(target: str, ctx: _Context, depth: int) -> None:
    if ctx.resolver is None or not target:
        return
    if depth >= MAX_INCLUDE_DEPTH or target in ctx.chain:
        log.warning("include_skipped", path=ctx.path, include=target,
                    reason="recursion" if target in ctx.chain else "too deep")
        return
    try:
        text = ctx.resolver(target)
    except Exception as exc:  # a resolver bug must not lose the page
        log.warning("include_failed", path=ctx.path, include=target, error=str(exc))
        return
    if not text:
        return
    _, _, body, _ = split_front_matter(text)
    ctx.buffer.append("\n\n")
    ctx.chain.append(target)
    try:
        _expand(body, ctx, depth + 1)
    finally:
        ctx.chain.pop()
    ctx.buffer.append("\n\n")


def _call_text(call: _Call, paired: bool) -> str:
    """What a (non-code, non-include) call contributes to the text."""
    name = call.name
    first = call.positional[0] if call.positional else ""
    if name in ("new-in", "deprecated-in"):
        version = first or call.named.get("version", "")
        label = ("New in " if name == "new-in" else "Deprecated in ") + _version(version)
        return f"\n\n{label.strip()}." if paired else label.strip()
    if name in ("glossary-term", "eturl", "hl", "kbd", "abbr"):
        return first
    if name in _MEDIA_SHORTCODES:
        seen: list[str] = []
        for key in ("caption", "alt", "title"):
            value = call.named.get(key, "").strip()
            if value and value not in seen:
                seen.append(value)
        return "\n".join(seen)  # inline: the call may sit inside a link
    if name == "tab":
        label = call.named.get("header") or call.named.get("title") or first
        return f"\n\n{label.strip()}:\n\n" if label.strip() else "\n\n"
    if name in ("alert", "details", "note", "warning", "callout"):
        label = call.named.get("title") or call.named.get("summary") or ""
        return f"\n\n{label.strip()}:" if label.strip() else "\n\n"
    if name in _BLOCK_SHORTCODES:
        return "\n\n"
    return ""


def _expand(text: str, ctx: _Context, depth: int) -> None:
    """Append `text`'s pieces to ctx, shortcodes expanded (recursing into includes)."""
    tokens: list[_Token] = []
    for kind, segment in split_fences(text):
        if kind == "code":
            tokens.append(("code", segment))
        else:
            tokens.extend(_tokenize(segment))
    pairs = _pair(tokens) if any(k == "call" for k, _ in tokens) else {}
    i = 0
    while i < len(tokens):
        kind, value = tokens[i]
        i += 1
        if kind == "text":
            ctx.buffer.append(ctx.literal(value))  # type: ignore[arg-type]
            continue
        if kind == "esc":
            ctx.buffer.append(ctx.protect(value))  # type: ignore[arg-type]
            continue
        if kind == "code":
            ctx.code(_expand_code(value, ctx))  # type: ignore[arg-type]
            continue
        call = value
        assert isinstance(call, _Call)
        if call.closing:
            ctx.buffer.append("\n\n" if call.name in _BLOCK_SHORTCODES else "")
            continue
        close = pairs.get(i - 1)
        if close is not None and call.name == "comment":
            i = close + 1
            continue
        if close is not None and call.name in _CODE_SHORTCODES:
            inner = tokens[i:close]
            if all(k != "code" for k, _ in inner):
                raw = "".join(v.raw if isinstance(v, _Call) else str(v) for _, v in inner)
                ctx.code(_code_from_call(call, raw, ctx))
                i = close + 1
                continue
        if call.name in ("param", "_param"):
            name = call.positional[0] if call.positional else call.named.get("name", "")
            ctx.buffer.append(ctx.literal(_param(ctx, name)) if name else "")
        elif call.name == "include":
            _include(call.positional[0] if call.positional else "", ctx, depth)
        elif "/" in call.name:
            # OTel-style partials named by path, e.g. `docs/languages/index-intro`.
            _include(call.name, ctx, depth)
        else:
            ctx.buffer.append(_call_text(call, close is not None))
    ctx.flush()


# --- pass 3: Markdown and HTML ------------------------------------------------------------

_INLINE_CODE2 = re.compile(r"(?<!`)``(?!`)((?:[^\n]|\n(?![ \t]*\n))+?)(?<!`)``(?!`)")
_INLINE_CODE1 = re.compile(r"(?<!`)`(?!`)((?:[^`\n]|\n(?![ \t]*\n))+?)`(?!`)")
_AUTOLINK = re.compile(r"<((?:https?|ftp)://[^\s<>]+|mailto:[^\s<>]+)>")
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_HTML_DROP = re.compile(
    r"<!--.*?-->|<\?.*?\?>|<(script|style|template)\b[^>]*>.*?</\1\s*>", re.S | re.I)
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)(?=[\s/>])")

_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_HEADING_ATTRS = re.compile(r"\s*\{\s*[#.][^{}]*\}\s*$")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*$")
_THEMATIC = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_REF_DEF = re.compile(r" {0,3}\[([^\]]+)\]:(.*)$")
_TABLE_DELIM = re.compile(r"\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?")
_LIST_MARK = re.compile(r"(?:[-*+]|\d{1,9}[.)])[ \t]+(?:\[[ xX]\][ \t]+)?")
_QUOTE = re.compile(r"(?:[ \t]*>[ \t]?)+")
_ALERT = re.compile(r"\[!(\w+)\][-+]?[ \t]*(.*)$")

_IMAGE = re.compile(r"!\[([^\]]*)\](?:\((?:<[^>]*>|[^()\s]*(?:\([^()]*\)[^()\s]*)*)"
                    r"(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)|\[[^\]]*\]|(?![(\[]))")
_LINK = re.compile(r"\[((?:[^\[\]]|\[[^\[\]]*\])*)\]"
                   r"(?:\((?:<[^>]*>|[^()\s]*(?:\([^()]*\)[^()\s]*)*)"
                   r"(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)|\[([^\]]*)\])")
_SHORTCUT_REF = re.compile(r"\[([^\[\]]+)\](?![(\[:])")
_FOOTNOTE_REF = re.compile(r"\[\^[^\]\s]+\]")
_EMPHASIS = (
    re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*"),
    re.compile(r"(?<!\w)__(?=\S)(.+?)(?<=\S)__(?!\w)"),
    re.compile(r"~~(?=\S)(.+?)(?<=\S)~~"),
    re.compile(r"(?<![\w*\\])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])"),
    re.compile(r"(?<![\w\\])_(?=[^\s_])(.+?)(?<=[^\s_])_(?!\w)"),
)
# A Goldmark block attribute line, e.g. `{.badge .w-75}` or `{class="x" #id}`.
_ATTR_LINE = re.compile(r"\{(?:\s*(?:[.#][\w-]+|[\w-]+=(?:\"[^\"]*\"|'[^']*'|[^\s}]+)))+\s*\}")
_HSPACE = re.compile(r"[ \t\u00a0]+")

HTML_TAGS = frozenset("""
a abbr address area article aside audio b base bdi bdo blockquote body br button canvas caption
center cite code col colgroup data datalist dd del details dfn dialog div dl dt em embed fieldset
figcaption figure font footer form h1 h2 h3 h4 h5 h6 head header hgroup hr html i iframe img input
ins kbd label legend li link main map mark menu meta meter nav noscript object ol optgroup option
output p param picture pre progress q rp rt ruby s samp script section select small source span
strike strong style sub summary sup svg table tbody td template textarea tfoot th thead time title
tr track tt u ul var video wbr path g circle rect line polyline polygon use symbol defs
""".split())
_HTML_BLOCK_TAGS = ["p", "div", "li", "ul", "ol", "dl", "dt", "dd", "tr", "table", "thead",
                    "tbody", "details", "summary", "section", "article", "header", "footer",
                    "figure", "figcaption", "blockquote", "pre", "h1", "h2", "h3", "h4", "h5",
                    "h6", "hr", "nav", "aside", "main"]


def _protect_inline(text: str, ctx: _Context) -> str:
    if "`" in text:
        def code(m: re.Match[str]) -> str:
            content = m.group(1).replace("\n", " ")
            if "\\|" in content:  # GFM: `\|` is a pipe even in code, in a table row
                line_start = text.rfind("\n", 0, m.start()) + 1
                if text[line_start:m.start()].lstrip().startswith("|"):
                    content = content.replace("\\|", "|")
            if len(content) > 2 and content[0] == " " and content[-1] == " ":
                content = content[1:-1]
            return ctx.protect(content)
        text = _INLINE_CODE2.sub(code, text)
        text = _INLINE_CODE1.sub(code, text)
    if "<" in text:
        text = _HTML_DROP.sub("", text)
        text = text.replace("<!--", "")  # an unclosed comment: keep the text after it
        text = _AUTOLINK.sub(lambda m: ctx.protect(m.group(1)), text)
    if "\\" in text:
        text = _ESCAPE.sub(lambda m: ctx.protect(m.group(1)), text)
    return text


def _has_html(text: str) -> bool:
    return "<" in text and any(m.group(2).lower() in HTML_TAGS for m in _TAG.finditer(text))


def _strip_html(text: str, in_table: bool) -> str:
    # Angle-bracket placeholders such as `<secret>` are words, not tags: keep them.
    text = _TAG.sub(lambda m: m.group(0) if m.group(2).lower() in HTML_TAGS
                    else "&lt;" + m.group(0)[1:], text)
    soup = BeautifulSoup(text, "html.parser")
    for el in soup.find_all(["script", "style", "template", "noscript"]):
        el.decompose()
    for node in soup.find_all(string=lambda s: isinstance(
            s, (Comment, ProcessingInstruction, Declaration, Doctype))):
        node.extract()
    for br in soup.find_all("br"):
        br.replace_with(" " if in_table else "\n")
    for img in soup.find_all("img"):
        alt = img.get("alt")
        img.replace_with(f" {alt} " if isinstance(alt, str) and alt.strip() else "")
    for row in soup.find_all("tr"):
        for child in list(row.children):
            if isinstance(child, NavigableString) and not child.strip():
                child.extract()  # indentation between cells
        for cell in row.find_all(["td", "th"], recursive=False)[:-1]:
            cell.insert_after(" | ")
    for el in soup.find_all(_HTML_BLOCK_TAGS):
        el.insert_before("\n")
        el.insert_after("\n")
    return soup.get_text()


def _table_rows(text: str) -> str:
    rows = []
    for line in text.split("\n"):
        if "|" not in line:
            rows.append(line)
            continue
        line = line.strip()
        if line.startswith("|"):
            line = line[1:]
        if line.endswith("|"):
            line = line[:-1]
        cells = [c.strip() for c in line.split("|")]
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)


def _inline(text: str, ctx: _Context, refs: set[str], *, table: bool = False) -> str:
    """One paragraph or heading of Markdown/HTML -> plain text (placeholders restored)."""
    html_done = False
    if _has_html(text):
        text = _strip_html(text, table)
        html_done = True
    if table:
        text = _table_rows(text)
    if "[" in text:
        if "![" in text:
            text = _IMAGE.sub(r"\1", text)
        if "[^" in text:
            text = _FOOTNOTE_REF.sub("", text)
        text = _LINK.sub(r"\1", text)
        if refs and "[" in text:
            text = _SHORTCUT_REF.sub(
                lambda m: m.group(1) if m.group(1).lower() in refs else m.group(0), text)
    if "*" in text or "_" in text or "~" in text:
        for pattern in _EMPHASIS:
            text = pattern.sub(r"\1", text)
    if not html_done and "&" in text:
        text = html.unescape(text)
    text = ctx.restore(text)
    lines = (line.strip() for line in _HSPACE.sub(" ", text).split("\n"))
    return "\n".join(line for line in lines if line)


@dataclass
class _Para:
    lines: list[str] = field(default_factory=list)
    table: bool = False
    listy: bool = False


def _markdown_blocks(text: str, ctx: _Context, refs: set[str], out: list[Block]) -> None:
    """Append the headings and paragraphs of one Markdown piece (no fences in it) to `out`."""
    text = _protect_inline(text, ctx)
    para = _Para()
    label = ""  # a GitHub alert's "Note:", waiting for the paragraph it introduces
    skip_ref_url = False

    def flush() -> None:
        nonlocal para, label
        if para.lines:
            body = _inline("\n".join(para.lines), ctx, refs, table=para.table)
            if label:
                body = f"{label} {body}".strip()
                label = ""
            if body:
                out.append(Block("paragraph", body))
        para = _Para()

    def heading(level: int, raw: str) -> None:
        nonlocal label
        flush()
        if label:
            out.append(Block("paragraph", label))
            label = ""
        title = _inline(_HEADING_ATTRS.sub("", raw), ctx, refs).replace("\n", " ")
        if title:
            out.append(Block("heading", title, level))

    for line in text.split("\n"):
        quoted = False
        if line.lstrip().startswith(">"):
            line = _QUOTE.sub("", line, count=1)
            quoted = True
            alert = _ALERT.match(line.strip())
            if alert and alert.group(1).lower() in _ALERT_TYPES:
                flush()
                title = ctx.restore(alert.group(2)).strip()
                label = alert.group(1).capitalize() + ":" + (f" {title}" if title else "")
                continue
        s = line.strip()
        if not s:
            flush()
            continue
        if skip_ref_url:
            skip_ref_url = False
            if line[:1] in (" ", "\t") or s[0] in "<" + _PH_OPEN or s.startswith("http"):
                continue
        first = s[0]
        if first == "#":
            m = _ATX.match(s)
            if m:
                heading(len(m.group(1)), m.group(2) or "")
                continue
        if first in "=-*_":
            if first in "=-" and para.lines and not para.table and not para.listy \
                    and _SETEXT.match(s):
                raw = " ".join(para.lines)
                para = _Para()
                heading(1 if first == "=" else 2, raw)
                continue
            if _THEMATIC.match(s):
                flush()
                continue
        if first == "[":
            m = _REF_DEF.match(s)
            if m:
                if m.group(1).startswith("^"):
                    s = m.group(2).strip()  # footnote: keep its text
                    if not s:
                        continue
                else:
                    skip_ref_url = not m.group(2).strip()
                    continue
        if first == "{" and _ATTR_LINE.fullmatch(s):
            continue
        if ("|" in s or first in ":-") and "-" in s and "|" in s and _TABLE_DELIM.fullmatch(s):
            para.table = True
            continue
        m = _LIST_MARK.match(s)
        if m:
            s = s[m.end():]
            if not para.lines:
                para.listy = True
        elif first == ":" and s.startswith((": ", ":\t")):
            s = s[2:]  # definition list
        if quoted and not para.lines:
            para.listy = True  # a quote's `---` is a rule, not a setext underline
        para.lines.append(s)
    flush()
    if label:
        out.append(Block("paragraph", label))


# --- public API ---------------------------------------------------------------------------

_REF_LABEL = re.compile(r"^ {0,3}\[([^\]^][^\]]*)\]:", re.M)


def clean_page(body: str, *, include_resolver: IncludeResolver | None = None,
               params: Mapping[str, str] | None = None, path: str | None = None) -> list[Block]:
    """Turn a page body (Markdown after the front matter) into ordered Blocks. Never raises.

    `include_resolver(path)` returns the Markdown of an `include`d snippet or a path-named
    partial (or None to drop the call); `params` gives `param`/`_param` values (else the name
    stands in). `path` only labels log events.
    """
    try:
        blocks = _clean(body, include_resolver, params or {}, path)
    except Exception as exc:  # a cleaner bug must not lose the page: fall back to raw text
        log.warning("clean_failed", path=path, error=f"{type(exc).__name__}: {exc}")
        text = body.strip()
        return [Block("paragraph", text)] if text else []
    if _maybe_over_cleaned(body, blocks):
        source, kept = _word_counts(body, blocks)
    else:
        source = kept = 0
    if source >= OVER_CLEANED_MIN_WORDS and kept < OVER_CLEANED_RATIO * source:
        log.warning("over_cleaned", path=path, source_words=source, kept_words=kept,
                    ratio=round(kept / source, 3))
    return blocks


def _clean(body: str, resolver: IncludeResolver | None, params: Mapping[str, str],
           path: str | None) -> list[Block]:
    ctx = _Context(params=params, resolver=resolver, path=path)
    _expand(body, ctx, 0)
    refs: set[str] = set()
    for kind, text in ctx.pieces:
        if kind == "md" and "]:" in text:
            refs.update(label.lower() for label in _REF_LABEL.findall(text))
    blocks: list[Block] = []
    for kind, text in ctx.pieces:
        if kind == "code":
            blocks.append(Block("code", text))
        else:
            _markdown_blocks(text, ctx, refs, blocks)
    return blocks


# Words a reader sees: markup that never shows (scripts, comments, tags, URLs, shortcode
# calls, link definitions) is left out of the source count, so only lost prose lowers it.
_WORD = re.compile(r"[^\W\d_]{3,}")
_NOT_PROSE = re.compile(
    r"<(script|style)\b.*?</\1\s*>|<!--.*?-->|<[^<>]{0,400}>|\]\([^()\s]{0,400}\)|\S+://\S+"
    r"|\{\{.{0,400}?\}\}"
    r"|^ {0,3}\[[^\]\n]+\]:[^\n]*$", re.S | re.I | re.M)


def _maybe_over_cleaned(body: str, blocks: list[Block]) -> bool:
    """Cheap first look by raw lengths; most pages keep well over half their non-code text."""
    code = text = 0
    for block in blocks:
        if block.kind == "code":
            code += len(block.text)
        else:
            text += len(block.text)
    return text < 0.5 * (len(body) - code)


def _words(text: str) -> int:
    return len(_WORD.findall(text))


def _word_counts(body: str, blocks: list[Block]) -> tuple[int, int]:
    """(prose words in the source outside fences, words kept outside code from the source)."""
    md, fenced = [], 0
    for kind, text in split_fences(body):
        if kind == "md":
            md.append(text)
        else:
            fenced += _words(text)
    source = _words(_NOT_PROSE.sub(" ", "".join(md)))
    text_words = sum(_words(b.text) for b in blocks if b.kind != "code")
    # Code made from shortcodes (code-toggle) was prose-looking source: count it as kept.
    made_code = sum(_words(b.text) for b in blocks if b.kind == "code") - fenced
    return source, text_words + max(made_code, 0)


def cleaned_ratio(body: str, blocks: Iterable[Block]) -> float:
    """Share of the source's prose words (outside code) that the cleaned blocks keep."""
    source, kept = _word_counts(body, list(blocks))
    return kept / source if source else 1.0


def blocks_to_text(blocks: Iterable[Block]) -> str:
    """Blocks as readable text (headings marked with #), for debugging and tests."""
    parts = []
    for block in blocks:
        if block.kind == "heading":
            parts.append("#" * max(block.level, 1) + " " + block.text)
        else:
            parts.append(block.text)
    return "\n\n".join(parts)
