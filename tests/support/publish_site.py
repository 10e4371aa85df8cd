"""A small two-language Hugo site with a page for each publish rule (build options, a glossary,
cascades with targets, headless bundles, drafts, dates): the site the Hugo comparisons build
(tests/discover/test_publish_hugo.py) and a whole ingest stores (test_publish_windows.py)."""

from __future__ import annotations


def page(title: str, front: str = "", body: str = "Some text about it.") -> str:
    return f"---\ntitle: {title}\n{front}---\n\n{body}\n"


CONFIG = """
baseURL = "https://example.org/docs/"
title = "Rules"
defaultContentLanguage = "en"
[languages.en]
weight = 1
[languages.fr]
weight = 2

[[cascade]]
[cascade.build]
render = "never"
list = "never"
[cascade.target]
path = "/hidden/**"
"""

FILES = {
    "hugo.toml": CONFIG,
    "content/_index.md": page("Home"),
    "content/_index.fr.md": page("Accueil"),
    # build options of the page itself
    "content/opts/_index.md": page("Options"),
    "content/opts/always.md": page("Always", "build:\n  render: always\n"),
    "content/opts/never.md": page("Never", "build:\n  render: never\n  list: always\n"),
    "content/opts/link.md": page("Link", "build:\n  render: link\n"),
    "content/opts/unlisted.md": page("Unlisted", "build:\n  list: never\n"),
    "content/opts/local.md": page("Local", "build:\n  list: local\n"),
    # a glossary: terms never rendered, shown on their section's page
    "content/glossary/_index.md": page(
        "Glossary",
        "build:\n  render: always\ncascade:\n  build:\n    render: never\n    list: local\n",
        "{{% glossary %}}",
    ),
    "content/glossary/bundle.md": page("bundle", body="A directory of files."),
    "content/glossary/kind.md": page("kind", body="What sort of page it is."),
    "content/glossary/own.md": page("own", "build:\n  list: always\n", body="Rendered."),
    # a translation: the (English) section's untargeted cascade does not reach it
    "content/glossary/kind.fr.md": page("genre", body="Quelle sorte de page."),
    # cascades: nearest ancestor wins, list form, targets by path, kind and language
    "content/a/_index.md": page("A", "cascade:\n  build:\n    render: never\n"),
    "content/a/p.md": page("A page"),
    "content/a/b/_index.md": page("B", "cascade:\n  build:\n    render: always\n"),
    "content/a/b/p.md": page("B page"),
    "content/a/b/c/p.md": page("C page"),
    "content/t/_index.md": page(
        "T",
        "cascade:\n"
        "  - build:\n      render: never\n"
        "    target:\n      path: '{/t/x/**,/t/z}'\n      kind: page\n"
        "  - headless: true\n    _target:\n      kind: section\n"
        "      path: /t/y\n"
        "  - draft: true\n    target:\n      sites:\n        matrix:\n"
        "          languages: [fr]\n",
    ),
    "content/t/p.md": page("T page"),
    "content/t/p.fr.md": page("Page T"),
    "content/t/u.fr.md": page("Page U"),
    "content/t/_index.fr.md": page("T fr"),
    "content/a/q.fr.md": page("Page Q"),
    "content/t/z.md": page("Z"),
    "content/t/x/_index.md": page("X"),
    "content/t/x/p.md": page("X page"),
    "content/t/y/_index.md": page("Y"),
    "content/t/y/p.md": page("Y page"),
    "content/hidden/p.md": page("Hidden"),
    # headless bundles, drafts (a draft section keeps its pages)
    "content/hb/index.md": page("Headless", "headless: true\n"),
    "content/hs/_index.md": page("Headless section", "headless: true\n"),
    "content/hs/p.md": page("In a headless section"),
    "content/drafts/_index.md": page("Drafts", "draft: true\n"),
    "content/drafts/p.md": page("Published under a draft"),
    "content/drafts/d.md": page("A draft", "draft: true\n"),
    # dates
    "content/blog/_index.md": page("Blog"),
    "content/blog/future.md": page("Future", "date: 2099-01-01\n"),
    "content/blog/later.md": page("Later", "publishDate: 2099-01-01\ndate: 2000-01-01\n"),
    "content/blog/past.md": page("Past", "publishDate: 2000-01-01\ndate: 2099-01-01\n"),
    "content/blog/expired.md": page("Expired", "expiryDate: 2020-01-01\n"),
    "content/blog/expires.md": page("Expires", "expiryDate: 2099-01-01T10:00:00Z\n"),
    "content/blog/old.md": page("Old", "unpublishdate: 2001-01-01\n"),
    "content/fsec/_index.md": page("Future section", "date: 2099-01-01\n"),
    "content/fsec/p.md": page("Under a future section"),
    "content/fsec/bundle/index.md": page("A bundle"),
    "content/fr-only/p.fr.md": page("Seulement"),
}
