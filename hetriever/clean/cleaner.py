"""Hugo page body -> ordered `Block`s: headings, paragraphs of plain text, fenced code kept intact.

Three passes, cheapest first:

1. fences, 2. shortcodes: `hetriever.clean.shortcodes` cuts out fenced code (nothing below looks
   inside it) and expands shortcodes, includes and params into Markdown and code pieces;
3. Markdown and HTML (here), line by line with regular expressions; BeautifulSoup only runs on the
   paragraphs that hold a real HTML tag, because it costs ~100x a regex pass.

Inline code, escaped shortcodes and autolinks are swapped for private-use placeholders while the
markup passes run, so `<div>` in backticks or `*` in a glob survives as written.
Nothing here raises on bad markup: it degrades to text.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from bs4 import BeautifulSoup
from bs4.element import CData, NavigableString, Tag

from hetriever.clean.fences import split_fences
from hetriever.clean.shortcodes import (
    _ALERT_TYPES,
    _PH_OPEN,
    IncludeLookup,
    _Context,
    _expand,
)
from hetriever.core.budget import check as check_budget
from hetriever.core.logs import get_logger
from hetriever.core.models import Block

log = get_logger(__name__)

# Over-cleaning check: pages with at least this many prose words outside code...
OVER_CLEANED_MIN_WORDS = 60
# ...should keep at least this share of it after cleaning.
OVER_CLEANED_RATIO = 0.30


# --- pass 3: Markdown and HTML ------------------------------------------------------------

_INLINE_CODE2 = re.compile(r"(?<!`)``(?!`)((?:[^\n]|\n(?![ \t]*\n))+?)(?<!`)``(?!`)")
_INLINE_CODE1 = re.compile(r"(?<!`)`(?!`)((?:[^`\n]|\n(?![ \t]*\n))+?)`(?!`)")
_AUTOLINK = re.compile(r"<((?:https?|ftp)://[^\s<>]+|mailto:[^\s<>]+)>")
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
# Every body below stops at the next opener, so an unclosed one costs the text up to there, not
# the rest of the page (many unclosed `<!--` were quadratic).
_HTML_DROP = re.compile(
    r"<!--(?:(?!<!--).)*?-->|<\?(?:(?!<\?).)*?\?>"
    r"|<(script|style|template)\b[^<>]*>(?:(?!<\1\b).)*?</\1\s*>",
    re.S | re.I,
)
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)(?=[\s/>])")
_ANY_TAG = re.compile(r"<[^<>]*>")
# A paragraph with more tags than this is stripped by a regular expression, not parsed into a
# tree (bs4 keeps ~1 KB per element).
MAX_HTML_TAGS = 20_000

_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_HEADING_ATTRS = re.compile(r"\s*\{\s*[#.][^{}]*\}\s*$")
_HEADING_ID = re.compile(r"(?:^|\s)#([^\s{}#]+)")  # the id in `{#id .class key=value}`
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*$")
_THEMATIC = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_REF_DEF = re.compile(r" {0,3}\[([^\]]+)\]:(.*)$")
_TABLE_DELIM = re.compile(r"\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?")
_LIST_MARK = re.compile(r"(?:[-*+]|\d{1,9}[.)])[ \t]+(?:\[[ xX]\][ \t]+)?")
_QUOTE = re.compile(r"(?:[ \t]*>[ \t]?)+")
_ALERT = re.compile(r"\[!(\w+)\][-+]?[ \t]*(.*)$")

_IMAGE = re.compile(
    r"!\[([^\]]*)\](?:\((?:<[^>]*>|[^()\s]*(?:\([^()]*\)[^()\s]*)*)"
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)|\[[^\]]*\]|(?![(\[]))"
)
_LINK = re.compile(
    r"\[((?:[^\[\]]|\[[^\[\]]*\])*)\]"
    r"(?:\((?:<[^>]*>|[^()\s]*(?:\([^()]*\)[^()\s]*)*)"
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)|\[([^\]]*)\])"
)
# Definition lines are gone before inline text is cleaned, so `[label]:` here is a use.
_SHORTCUT_REF = re.compile(r"\[([^\[\]]+)\](?![(\[])")
_FOOTNOTE_REF = re.compile(r"\[\^[^\]\s]+\]")
# Emphasis may wrap onto the next line of its paragraph (sources wrapped at 80 columns).
# A span's text holds no delimiter of its kind: each opener is then tried up to the next
# delimiter only, so a paragraph of openers with no closer is linear (it was quadratic).
_EMPHASIS = (
    re.compile(r"\*\*(?=\S)((?:(?!\*\*).)+?)(?<=\S)\*\*", re.S),
    re.compile(r"(?<!\w)__(?=\S)((?:(?!__).)+?)(?<=\S)__(?!\w)", re.S),
    re.compile(r"~~(?=\S)((?:(?!~~).)+?)(?<=\S)~~", re.S),
    re.compile(r"(?<![\w*\\])\*(?=[^\s*])([^*]+?)(?<=[^\s*])\*(?![\w*])", re.S),
    re.compile(r"(?<![\w\\])_(?=[^\s_])((?:[^_]|(?<=\w)_(?=\w))+?)(?<=[^\s_])_(?!\w)", re.S),
)
# A Goldmark block attribute line, e.g. `{.badge .w-75}` or `{class="x" #id}`.
_ATTR_LINE = re.compile(r"\{(?:\s*(?:[.#][\w-]+|[\w-]+=(?:\"[^\"]*\"|'[^']*'|[^\s}]+)))+\s*\}")
_HSPACE = re.compile(r"[ \t\u00a0]+")

HTML_TAGS = frozenset(
    """
a abbr address area article aside audio b base bdi bdo blockquote body br button canvas caption
center cite code col colgroup data datalist dd del details dfn dialog div dl dt em embed fieldset
figcaption figure font footer form h1 h2 h3 h4 h5 h6 head header hgroup hr html i iframe img input
ins kbd label legend li link main map mark menu meta meter nav noscript object ol optgroup option
output p param picture pre progress q rp rt ruby s samp script section select small source span
strike strong style sub summary sup svg table tbody td template textarea tfoot th thead time title
tr track tt u ul var video wbr path g circle rect line polyline polygon use symbol defs
""".split()
)
_HTML_BLOCK_TAGS = [
    "p",
    "div",
    "li",
    "ul",
    "ol",
    "dl",
    "dt",
    "dd",
    "tr",
    "table",
    "thead",
    "tbody",
    "details",
    "summary",
    "section",
    "article",
    "header",
    "footer",
    "figure",
    "figcaption",
    "blockquote",
    "pre",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "nav",
    "aside",
    "main",
]


def _protect_inline(text: str, ctx: _Context) -> str:
    if "`" in text:

        def code(m: re.Match[str]) -> str:
            content = m.group(1).replace("\n", " ")
            if "\\|" in content:  # GFM: `\|` is a pipe even in code, in a table row
                line_start = text.rfind("\n", 0, m.start()) + 1
                if text[line_start : m.start()].lstrip().startswith("|"):
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
    text = _TAG.sub(
        lambda m: m.group(0) if m.group(2).lower() in HTML_TAGS else "&lt;" + m.group(0)[1:], text
    )
    if text.count("<") > MAX_HTML_TAGS:
        # A tree this large costs memory in proportion; its tags are dropped as text instead.
        return html.unescape(_ANY_TAG.sub(" ", text))
    return _soup_text(BeautifulSoup(text, "html.parser"), in_table)


_DROPPED_TAGS = frozenset(("script", "style", "template", "noscript"))
_BLOCK_TAG_SET = frozenset(_HTML_BLOCK_TAGS)
_TEXT_TYPES = (NavigableString, CData)
_END = object()  # a block element's end, on the walk's stack


def _soup_text(soup: BeautifulSoup, in_table: bool) -> str:
    """The text of a parsed HTML fragment, one walk with a stack of its own (linear in the
    tree, however deep it nests): block elements on lines of their own, table cells apart
    by ` | `, `<br>` a line break (a space in a table), an image its alt text; scripts,
    styles, comments and declarations dropped. (Editing the tree instead, with bs4's
    `insert_after`, walks each element's descendants once per edit: quadratic in depth.)"""
    parts: list[str] = []
    stack: list[object] = list(reversed(soup.contents))
    walked = 0
    while stack:
        node = stack.pop()
        walked += 1
        if not walked % 4096:
            check_budget()
        if node is _END:
            parts.append("\n")
            continue
        if isinstance(node, str):  # a string of ours (a cell separator) or of the tree
            if type(node) in _TEXT_TYPES or type(node) is str:
                parts.append(node)
            continue
        if not isinstance(node, Tag):
            continue
        name = node.name
        if name in _DROPPED_TAGS:
            continue
        if name == "br":
            parts.append(" " if in_table else "\n")
            continue
        if name == "img":
            alt = node.get("alt")
            parts.append(f" {alt} " if isinstance(alt, str) and alt.strip() else "")
            continue
        children: list[object] = list(node.contents)
        if name == "tr":
            # indentation (and a <br>) between cells is not text; cells apart by " | "
            children = [
                c
                for c in children
                if not (
                    (isinstance(c, NavigableString) and type(c) in _TEXT_TYPES and not c.strip())
                    or (isinstance(c, Tag) and c.name in ("br", "img") and not _img_alt(c))
                )
            ]
            cells = [
                i for i, c in enumerate(children) if isinstance(c, Tag) and c.name in ("td", "th")
            ]
            for i in reversed(cells[:-1]):
                children.insert(i + 1, " | ")
        if name in _BLOCK_TAG_SET:
            parts.append("\n")
            stack.append(_END)
        stack.extend(reversed(children))
    return "".join(parts)


def _img_alt(tag: Tag) -> str:
    alt = tag.get("alt") if tag.name == "img" else None
    return alt if isinstance(alt, str) and alt.strip() else ""


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
                lambda m: m.group(1) if _ref_key(ctx.restore(m.group(1))) in refs else m.group(0),
                text,
            )
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
        attrs = _HEADING_ATTRS.search(raw)
        title = _inline(raw[: attrs.start()] if attrs else raw, ctx, refs).replace("\n", " ")
        if title:
            given = _HEADING_ID.search(attrs.group().strip().strip("{}")) if attrs else None
            out.append(Block("heading", title, level, given.group(1) if given else ""))

    for number, line in enumerate(text.split("\n")):
        if not number % 1024:
            check_budget()
        quoted = False
        if line.lstrip().startswith(">"):
            line = _QUOTE.sub("", line, count=1)
            quoted = True
            alert = _ALERT.match(line.strip())
            if alert and alert.group(1).lower() in _ALERT_TYPES:
                flush()
                title = _inline(alert.group(2), ctx, refs).strip()
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
            if (
                first in "=-"
                and para.lines
                and not para.table
                and not para.listy
                and _SETEXT.match(s)
            ):
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
            s = s[m.end() :]
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


def _ref_key(label: str) -> str:
    """A reference label as CommonMark matches it (case and runs of spaces ignored), with code
    backticks dropped: a use's inline code is already swapped for its text when it is matched
    (``[`where`]`` must find the definition ``[`where`]: /functions/where/``)."""
    return " ".join(label.replace("`", " ").split()).casefold()


def clean_page(
    body: str,
    *,
    include_resolver: IncludeLookup | None = None,
    params: Mapping[str, str] | None = None,
    path: str | None = None,
) -> list[Block]:
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
        log.warning(
            "over_cleaned",
            path=path,
            source_words=source,
            kept_words=kept,
            ratio=round(kept / source, 3),
        )
    return blocks


def _clean(
    body: str, resolver: IncludeLookup | None, params: Mapping[str, str], path: str | None
) -> list[Block]:
    ctx = _Context(params=params, resolver=resolver, path=path)
    _expand(body, ctx, 0)
    refs: set[str] = set()
    for kind, text in ctx.pieces:
        if kind == "md" and "]:" in text:
            refs.update(_ref_key(label) for label in _REF_LABEL.findall(text))
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
    r"<(script|style)\b(?:(?!<\1\b).)*?</\1\s*>|<!--(?:(?!<!--).)*?-->|<[^<>]{0,400}>"
    r"|\]\([^()\s]{0,400}\)|(?<!\w)\w+://\S+"
    r"|\{\{.{0,400}?\}\}"
    r"|^ {0,3}\[[^\]\n]+\]:[^\n]*$",
    re.S | re.I | re.M,
)


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
