"""Hugo shortcodes and fenced code: the first two passes of cleaning a page body.

1. fences (`hetriever.clean.fences`): fenced code blocks are cut out first, so nothing below ever
   looks inside them (Hugo expands only shortcodes there: `param`/`_param` values and escaped
   examples);
2. shortcodes: only `{{<` and `{{%` start one (`{{ .Title }}` is Go-template text and stays);
   pairs are matched by name, not delimiter, so `{{% tab %}}...{{< /tab >}}` works; `include`d
   snippets and path-named partials are expanded (recursion-guarded, template variables
   filled: `hetriever.clean.snippets`), `param` is resolved from the page's front matter.

The result is a `_Context` whose `pieces` are Markdown and code in page order; inline code,
escaped shortcodes and autolinks in the Markdown become private-use placeholders that the
Markdown pass (`hetriever.clean`) restores.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from hetriever.clean.fences import split_fences
from hetriever.clean.snippets import fill_template, partial_names
from hetriever.core.logs import get_logger
from hetriever.parse.page import split_front_matter

log = get_logger(__name__)

# A snippet name -> its text (None: no such snippet); the index stage passes one per page.
IncludeLookup = Callable[[str], "str | None"]

MAX_INCLUDE_DEPTH = 3


# --- placeholders -------------------------------------------------------------------------

_PH_OPEN, _PH_CLOSE = "\ue000", "\ue001"
_PLACEHOLDER = re.compile("\ue000(\\d+)\ue001")


@dataclass
class _Context:
    params: Mapping[str, str]
    resolver: IncludeLookup | None
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


# --- pass 2: shortcodes -------------------------------------------------------------------

_SC_START = re.compile(r"\{\{([<%])")
_SC_ESCAPED = re.compile(r"\{\{([<%])\s*/\*(.*?)\*/\s*([>%])\}\}", re.S)
_SC_ARG = re.compile(r'\s*(?:([\w.-]+)\s*=\s*)?("(?:[^"\\]|\\.)*"|`[^`]*`|[^\s"`]+)')
_SC_MAX_LEN = 4000  # a call longer than this is taken for stray text
# In code, Hugo still expands shortcodes; only these two produce text we can know.
_CODE_SC = re.compile(
    r"\{\{([<%])\s*/\*(?P<esc>.*?)\*/\s*([>%])\}\}"
    r"|\{\{[<%]\s*_?param\s+(?P<q>\"?)(?P<name>[^\"\s%>]+)(?P=q)\s*[>%]\}\}",
    re.S,
)

_BLOCK_SHORTCODES = {
    "tab",
    "tabpane",
    "tabs",
    "alert",
    "details",
    "note",
    "warning",
    "callout",
    "code-toggle",
    "highlight",
    "comment",
    "cards",
    "card",
    "config_option",
}
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
    if len(value) >= 2 and value[0] == value[-1] and value[0] in '"`':
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
        if (
            esc
            and esc.group(1) == ("<" if esc.group(3) == ">" else "%")
            and len(esc.group(0)) <= _SC_MAX_LEN
        ):
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
            token = ("call", _parse_call(text[start + 3 : end - 3], text[start:end]))
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


def _include(names: list[str], ctx: _Context, depth: int, args: Mapping[str, str]) -> None:
    """Expand the first of `names` the resolver finds, its template variables filled from
    `args` (see `hetriever.clean.snippets.fill_template`)."""
    target = names[0] if names else ""
    if ctx.resolver is None or not target:
        return
    if depth >= MAX_INCLUDE_DEPTH or target in ctx.chain:
        log.warning(
            "include_skipped",
            path=ctx.path,
            include=target,
            reason="recursion" if target in ctx.chain else "too deep",
        )
        return
    text = None
    for name in names:
        try:
            text = ctx.resolver(name)
        except Exception as exc:  # a resolver bug must not lose the page
            log.warning("include_failed", path=ctx.path, include=name, error=str(exc))
            return
        if text:
            break
    if not text:
        return
    _, _, body, _ = split_front_matter(text)
    ctx.buffer.append("\n\n")
    ctx.chain.append(target)
    try:
        _expand(fill_template(body, args) if "{{" in body else body, ctx, depth + 1)
    finally:
        ctx.chain.pop()
    ctx.buffer.append("\n\n")


def _include_args(call: _Call, first: int) -> dict[str, str]:
    """A snippet's template arguments: positional ones from `first` on as `$1`, `$2`, ...,
    and the named ones by name."""
    args = {str(i): v for i, v in enumerate(call.positional[first:], start=1)}
    args.update(call.named)
    return args


def _config_option(call: _Call, ctx: _Context) -> str:
    """OpenTelemetry's `config_option`: the page shows the system property and the environment
    variable it maps to (upper case, `.` and `-` as `_`), then the default."""
    name = call.named.get("name", "").strip()
    if not name:
        return "\n\n"
    env = call.named.get("envVar") or re.sub(r"[.-]", "_", name.upper())
    lines = [f"System property: {ctx.protect(name)}", f"Environment variable: {ctx.protect(env)}"]
    if call.named.get("default"):
        lines.append(f"Default: {ctx.protect(call.named['default'])}")
    return "\n\n" + "\n".join(lines) + "\n\n"


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
            target = call.positional[0] if call.positional else ""
            _include([target] if target else [], ctx, depth, _include_args(call, 1))
        elif "/" in call.name:
            # OTel-style partials named by path, e.g. `docs/languages/index-intro`.
            _include(partial_names(call.name), ctx, depth, _include_args(call, 0))
        elif call.name == "config_option":
            ctx.buffer.append(_config_option(call, ctx))
        else:
            ctx.buffer.append(_call_text(call, close is not None))
    ctx.flush()
