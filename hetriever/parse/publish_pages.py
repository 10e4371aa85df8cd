"""Hugo's publish rules applied to a repository's files: a page's ancestor sections (whose
`cascade` reaches it), the verdict for a page, and the text of pages Hugo does not render that
another page shows.

`hetriever.discover.publish_rules` holds the rules; this module finds what they need at one commit
through a `read(path) -> Page | None` function (the run's include resolver, which reads each
file once per run) and a listing of the content tree.

Shown elsewhere: hugo-docs keeps each glossary term as a page that is never rendered (its
section cascades `build: {render: never, list: local}`), and its Glossary section page calls
the `glossary` shortcode, which renders every page of that section, by title, as a term and
its text. That section page's text gets the terms (each under a heading of its own, so a hit
lands on the term's anchor), and a term is skipped with the page it is shown on.
"""

from __future__ import annotations

import datetime as dt
import posixpath
import re
from collections.abc import Callable, Iterable, Sequence

from hetriever.discover.publish_rules import Decision, Section, SiteRules, decide, hugo_path
from hetriever.discover.site import Site
from hetriever.parse.parsed_page import Page

ReadPage = Callable[[str], "Page | None"]

# `{{% glossary %}}` / `{{< glossary >}}`, not escaped (`{{%/* glossary */%}}` is text).
GLOSSARY_CALL = re.compile(r"\{\{([<%])\s*glossary\s*/?\s*[>%]\}\}")
_SECTION_NAMES = ("_index.md", "_index.markdown", "_index.html")


def content_root(file_path: str, site: Site | None, content_dir: str) -> tuple[str, str, str]:
    """(root directory, path below it, language) of a repository file: the site's content
    root that holds it, else `content_dir`."""
    located = site.locate(file_path) if site is not None else None
    if located is not None:
        # The file's own path below the root (site.locate drops a `.fr` language suffix).
        depth = len([p for p in located.relative.split("/") if p])
        parts = file_path.split("/")
        root = "/".join(parts[: len(parts) - depth])
        return root, "/".join(parts[len(parts) - depth :]), located.lang
    base = content_dir.strip("/")
    relative = (
        file_path[len(base) + 1 :] if base and file_path.startswith(base + "/") else file_path
    )
    return base, relative, (site.default_lang if site is not None else "en")


def section_files(directory: str, lang: str, site: Site | None) -> list[tuple[str, str]]:
    """The files that can be a directory's section page, with their languages: the page's
    own language's first. In a root of one language, its `_index` files; with translations
    by file name, every language's (`_index.fr.md`; `_index.md` is the default's)."""
    join = (lambda name: posixpath.join(directory, name)) if directory else (lambda n: n)
    default = site.default_lang if site is not None else "en"
    if site is None or not site.multilingual or _root_lang(site, directory):
        return [(join(name), lang) for name in _SECTION_NAMES]
    found = [(join(f"_index.{lang}.md"), lang)]
    if lang == default:
        found += [(join(name), default) for name in _SECTION_NAMES]
    for other in site.languages:
        if other != lang:
            found.append((join(f"_index.{other}.md"), other))
            if other == default:
                found += [(join(name), default) for name in _SECTION_NAMES]
    return found


def _root_lang(site: Site, directory: str) -> str:
    """The language of the content root holding `directory`, "" when it holds several."""
    located = site.locate(posixpath.join(directory, "_index.md"))
    if located is None:
        return ""
    roots = [
        r
        for r in site.roots
        if r.lang == located.lang
        and (directory == r.source or directory.startswith(r.source.rstrip("/") + "/"))
    ]
    return located.lang if roots else ""


def ancestors(file_path: str, read: ReadPage, site: Site | None, content_dir: str) -> list[Section]:
    """The sections above a file (each an `_index` file's Hugo path, publish facts and
    language), nearest first, up to its content root's home page."""
    root, relative, lang = content_root(file_path, site, content_dir)
    parts = [p for p in relative.split("/") if p]
    is_section = bool(parts) and parts[-1].split(".")[0] == "_index"
    dirs = parts[:-1]
    if is_section:  # a section's own cascade is its own; its ancestors start above it
        if not dirs:
            return []  # the home page
        dirs = dirs[:-1]
    levels = [dirs[:i] for i in range(len(dirs), -1, -1)]
    found: list[Section] = []
    for level in levels:
        directory = posixpath.join(root, *level) if level else root
        seen: set[str] = set()
        for candidate, file_lang in section_files(directory, lang, site):
            if file_lang in seen:
                continue
            page = read(candidate)
            if page is not None:
                seen.add(file_lang)
                found.append(Section("/" + "/".join(level).lower(), page.publish, file_lang))
    return found


def verdict(page: Page, relative: str, parents: Sequence[Section], site: Site | None) -> Decision:
    """Hugo's verdict on a parsed page, its ancestors' facts given."""
    path, kind = hugo_path(relative)
    return decide(
        page.publish,
        parents,
        path=path,
        kind=kind,
        lang=page.lang or (site.default_lang if site is not None else "en"),
        redirect=bool(page.front_matter.get("redirect")),
        site=site.rules if site is not None else SiteRules(),
    )


# --- pages shown on another page ------------------------------------------------------


def calls_glossary(body: str) -> bool:
    return GLOSSARY_CALL.search(body) is not None


def glossary_terms(
    section_path: str,
    listing: Iterable[str],
    read: ReadPage,
    site: Site | None,
    content_dir: str,
    now: dt.datetime,
) -> list[Page]:
    """The pages of the section whose `_index` file is `section_path`, as its `.Pages`
    holds them (built, not `list: never`), sorted by title: what the `glossary` shortcode
    renders."""
    directory = posixpath.dirname(section_path)
    section = read(section_path)
    terms = []
    for path in sorted(listing):
        rest = path[len(directory) + 1 :] if path.startswith(directory + "/") else ""
        parts = rest.split("/")
        leaf = len(parts) == 1 and parts[0].endswith(".md") and not parts[0].startswith("_")
        bundle = len(parts) == 2 and parts[1] == "index.md"
        if not (leaf or bundle):
            continue
        page = read(path)
        if page is None or (section is not None and page.lang != section.lang):
            continue  # a translation is its own language's section's page
        _, relative, _ = content_root(path, site, content_dir)
        decision = verdict(page, relative, ancestors(path, read, site, content_dir), site)
        if (
            decision.draft
            or decision.headless
            or decision.list == "never"
            or not decision.in_window(now)
        ):
            continue
        terms.append(page)
    return sorted(terms, key=lambda p: (p.title.lower(), p.file_path))


def glossary_markdown(terms: Sequence[Page]) -> str:
    """The terms as the shortcode shows them: each its title (a heading, so it is a section
    with Hugo's anchor for it) and its text."""
    return "\n".join(f"\n###### {term.title}\n\n{term.body.strip()}\n" for term in terms)


def expand_glossary(body: str, terms: Sequence[Page]) -> str:
    return GLOSSARY_CALL.sub(lambda _: glossary_markdown(terms), body)


def shown_on(term_path: str, read: ReadPage) -> Page | None:
    """The section page that shows a term (its parent section's `_index` calls `glossary`
    and the term is one of its pages), or None."""
    directory = posixpath.dirname(term_path)
    if posixpath.basename(term_path) == "index.md":
        directory = posixpath.dirname(directory)
    for name in _SECTION_NAMES:
        section = read(posixpath.join(directory, name))
        if section is not None:
            return section if calls_glossary(section.body) else None
    return None
