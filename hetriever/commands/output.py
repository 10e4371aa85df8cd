"""What the command line prints of the docs: their text as written, never as markup.

Titles, headings, passages, paths and errors come from documentation sites, where `[/name]`,
`[[menus.main]]` and `receivers: [zipkin]` are ordinary text; Rich would read them as markup
(and fail on a closing tag, or drop the brackets). Every piece of such text reaches the
console here as a `rich.text.Text`, and control characters (an ESC starting a terminal
sequence, a bell, a carriage return that overwrites the line) are shown escaped (`\\x1b`), so
docs text can never drive the terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text

from hetriever.core.terminal import terminal_safe

__all__ = ["terminal_safe", "plain", "joined", "one_line", "print_search_results"]
PASSAGE_CHARS = 220  # of a result's passage, on one line


def one_line(text: object) -> str:
    """`terminal_safe`, on one line (newlines and tabs as spaces)."""
    return " ".join(terminal_safe(text).split())


def plain(text: object, style: str = "") -> Text:
    """Docs text for a console: printed as written, in `style`."""
    return Text(terminal_safe(text), style=style)


def joined(*parts: tuple[object, str] | str) -> Text:
    """Pieces of text, each as written, in its own style: `joined(("1. ", "bold"), title)`."""
    out = Text()
    for part in parts:
        text, style = part if isinstance(part, tuple) else (part, "")
        out.append(terminal_safe(text), style=style)
    return out


def score_text(score: float) -> str:
    """A score as a person reads it: two decimals (0.93)."""
    return f"{score:.2f}"


def heading_line(title: object, heading: object = "") -> str:
    """ "Title > Heading > Subheading", or the title alone."""
    return f"{one_line(title)} > {one_line(heading)}" if heading else one_line(title)


def passage_of(match: Any, limit: int = PASSAGE_CHARS) -> str:
    """The match's passage on one line, without its "title > heading" prefix (a page record:
    without its title), cut at `limit` characters with an ellipsis."""
    cut = "\n" if match.metadata.get("page_record") else "\n\n"
    body = one_line(match.content.split(cut, 1)[-1])
    return body[:limit] + ("…" if len(body) > limit else "")


def print_search_results(result: Any, links: Sequence[str], console: Any, index: str = "") -> None:
    """A search's results for a person: per match its title and heading path, repository and
    link (`links`, one per match), the rounded score and the version, the passage, the other
    passages' headings, the versions holding the page and the translations; then where the index is (`index`)."""
    language = (
        f", in {result.query_language}: the query's language (--lang to choose)"
        if getattr(result, "query_language", "")
        else ""
    )
    console.print(
        joined(
            (f"{result.total_results} results", "bold"),
            f" for {result.query!r} ({result.mode}, {result.search_time_ms:.1f} ms{language})",
        ),
        highlight=False,
    )
    for i, (match, link) in enumerate(zip(result.matches, links), start=1):
        meta = match.metadata
        repository, link = one_line(meta.get("repository", "")), one_line(link)
        where = f"{repository}  {link}" if "://" in link else f"{repository}{link}"
        console.print()
        headed = heading_line(meta.get("title", ""), meta.get("heading_context"))
        console.print(
            joined((f"{i}. {headed}", "bold cyan"), "  ", (where, "dim")), highlight=False
        )
        version = f", version {one_line(match.version)}" if match.version else ""
        console.print(
            plain(f"   score {score_text(match.score)} ({match.source}){version}"),
            highlight=False,
        )
        console.print(plain(f"   {passage_of(match)}"), highlight=False)
        also = [one_line(p["heading_context"]) for p in match.passages if p.get("heading_context")]
        if also:
            console.print(plain(f"   also: {'; '.join(also)}", "dim"), highlight=False)
        if match.versions:
            held = ", ".join(
                v["version"] + (" (differs)" if v["differs"] else "") for v in match.versions
            )
            console.print(plain(f"   in versions: {one_line(held)}", "dim"), highlight=False)
        if match.translations:
            other = ", ".join(f"{t['lang']} {t['url']}" for t in match.translations)
            console.print(
                plain(f"   in other languages: {one_line(other)}", "dim"), highlight=False
            )
    if index:
        console.print(plain(f"index: {index}", "dim"), highlight=False)
