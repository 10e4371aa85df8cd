"""The query flow's results for a person: the `query-results` artifact and the run-log lines.

Per result: the title as a link to the page where it is published (at its heading's anchor),
the heading path, the passage (trimmed) and the rounded scores. Everything from the docs is
text in the artifact, never markup that renders or runs: HTML and Markdown characters are
escaped, and only an http(s) address becomes a link.
"""

from __future__ import annotations

import html
import re
from typing import Any
from urllib.parse import quote, urlsplit

from hetriever.chunk.chunker import CONTEXT_SEPARATOR
from hetriever.chunk.sections import heading_anchor
from hetriever.core.logs import watch_safe
from hetriever.core.terminal import terminal_safe

PASSAGE_CHARS = 300
LOGGED = 5  # results in the run's log (what `prefect deployment run --watch` shows)
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")
# Kept as they are in a link's address; the rest (spaces, parentheses, quotes, brackets,
# angle brackets, backticks) percent-encoded, so the address cannot end the link early.
_URL_SAFE = ":/?#&=%~+@!$,;*-._"


def markdown_text(text: object) -> str:
    """`text` on one line, shown as written by a Markdown renderer: HTML characters as
    entities, Markdown's punctuation backslash-escaped, control characters as `\\xNN`."""
    line = " ".join(terminal_safe(text).split())
    return _MARKDOWN.sub(r"\\\1", html.escape(line, quote=False))


def link_target(url: str) -> str:
    """An http(s) address fit for a Markdown link, or "" (a site-relative URL, another
    scheme: no link)."""
    if urlsplit(url).scheme not in ("http", "https"):
        return ""
    return quote(url, safe=_URL_SAFE)


def anchored(link: str, metadata: dict[str, Any]) -> str:
    """The page's link at the anchor Hugo gives the passage's deepest heading (none for a
    page record, or a passage above the first heading)."""
    context = str(metadata.get("heading_context") or "")
    if not context or metadata.get("page_record") or "#" in link:
        return link
    anchor = heading_anchor(context.split(CONTEXT_SEPARATOR)[-1])
    return f"{link}#{anchor}" if anchor else link


def passage(match: Any, limit: int = PASSAGE_CHARS) -> str:
    """The passage without its "title > heading" prefix, on one line, at most `limit`
    characters."""
    cut = "\n" if match.metadata.get("page_record") else "\n\n"
    body = " ".join(match.content.split(cut, 1)[-1].split())
    return body[:limit] + ("…" if len(body) > limit else "")


def scores(match: Any) -> str:
    parts = [f"score {match.score:.2f} ({match.source})"]
    parts += [
        f"{name} {value:.2f}"
        for name, value in (("dense", match.dense_score), ("BM25", match.bm25_score))
        if value is not None
    ]
    return ", ".join(parts)


def results_markdown(result: Any, links: list[str]) -> str:
    """The `query-results` artifact."""
    lines = [
        f"# Results for {markdown_text(result.query[:200])}",
        "",
        f"{result.total_results} results ({markdown_text(result.mode)}, "
        f"{result.search_time_ms:.1f} ms)",
        "",
    ]
    for i, (match, link) in enumerate(zip(result.matches, links), start=1):
        meta = match.metadata
        title = markdown_text(meta.get("title", "") or meta.get("url", ""))
        target = link_target(anchored(link, meta))
        lines.append(f"## {i}. [{title}]({target})" if target else f"## {i}. {title}")
        where = markdown_text(meta.get("repository", "")) + (
            "" if target else f" {markdown_text(link)}"
        )
        version = f" · version {markdown_text(match.version)}" if match.version else ""
        lines += ["", f"{where} · {scores(match)}{version}", ""]
        if match.versions:
            held = ", ".join(
                v["version"] + (" (differs)" if v["differs"] else "") for v in match.versions
            )
            lines += [f"In versions: {markdown_text(held)}", ""]
        if meta.get("heading_context"):
            lines += [f"Section: {markdown_text(meta['heading_context'])}", ""]
        lines += [f"> {markdown_text(passage(match))}", ""]
    if not result.matches:
        lines.append("No results.")
    return "\n".join(lines)


def result_lines(result: Any, links: list[str], limit: int = LOGGED) -> list[str]:
    """The top results as lines for the run's log: rank, title > heading, score, link."""
    lines = []
    for i, (match, link) in enumerate(zip(result.matches[:limit], links), start=1):
        meta = match.metadata
        heading = f" > {meta['heading_context']}" if meta.get("heading_context") else ""
        title = " ".join(f"{meta.get('title', '')}{heading}".split())
        # --watch prints these on a terminal, as Rich markup: docs text shown, never obeyed
        lines.append(
            watch_safe(terminal_safe(f"{i}. {title}  {match.score:.2f}  {anchored(link, meta)}"))
        )
    return lines
