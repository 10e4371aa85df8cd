"""hetriever indexes exactly what Hugo publishes of the real corpora: hugo-docs v2 and the
multilingual opentelemetry-io v2-site, language by language.

The corpora hold content and configuration only (no theme, layouts or content modules), so
Hugo builds them with the oracle's stub theme (`tests/support/hugo_oracle.py`) and a stub
configuration: hugo-docs has none in the corpus, and gets the publish settings of its real
`hugo.toml` (content in `content/en`, `timeZone`, `frontmatter` dates); opentelemetry-io keeps
its own `hugo.yaml` keys that decide pages and URLs, and its content mounts of whole language
roots. The site's other mounts are what neither side can index: sources absent from the
corpus (`tmp/`: specification submodules) and English sections mounted into the other
languages' trees as fallbacks (hetriever indexes each page once, in its own language:
`hetriever.discover.site` leaves those mounts out with a note).

hetriever's side runs each file through the per-file step (`tests/support/hugo_oracle.py`
`hetriever_pages`), which decides every skip and URL a full ingest does; only embedding and
storing are left out, which change neither.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.support.chroma_fixtures import store_settings
from tests.support.helpers import commit_all, corpus_version, init_repo
from tests.support.hugo_oracle import hetriever_pages, hugo_binary, hugo_pages

pytestmark = [pytest.mark.corpus, pytest.mark.slow]

# One clock for both sides (Hugo's --clock, the run's `now`), so the expected counts hold
# whenever the test runs.
CLOCK = "2026-11-27T12:00:00Z"
NOW = dt.datetime(2026, 11, 27, 12, tzinfo=dt.UTC)

HUGO_DOCS_CONFIG = """
baseURL = "https://gohugo.io/"
contentDir = "content/en"
defaultContentLanguage = "en"
timeZone = "Europe/Oslo"
[frontmatter]
  date = ['date']
  expiryDate = ['expirydate']
  publishDate = ['publishdate', 'date']
"""
# What decides pages and URLs in opentelemetry.io's hugo.yaml, and the output formats its
# cascade names; the rest (theme, markup, params, ...) is for rendering.
OTEL_KEYS = (
    "baseurl",
    "defaultcontentlanguage",
    "defaultcontentlanguageinsubdir",
    "languages",
    "disablekinds",
    "disablelanguages",
    "cascade",
    "permalinks",
    "uglyurls",
    "timezone",
    "frontmatter",
    "buildfuture",
    "buildexpired",
    "builddrafts",
    "outputformats",
    "mediatypes",
    "outputs",
    "disablealiases",
)


def corpus_site(tmp_path: Path, source: Path, config: dict[str, str]) -> Path:
    site = init_repo(tmp_path / "site")
    shutil.copytree(source / "content", site / "content")
    for name, text in config.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    commit_all(site, "corpus")
    return site


def otel_config(source: Path) -> dict[str, str]:
    """The site's publish keys and its mounts of whole language roots present in the corpus,
    as `config/_default/hugo.yaml` and `module.yaml`."""
    real = yaml.safe_load((source / "config/_default/hugo.yaml").read_text())
    kept = {k: v for k, v in real.items() if k.lower() in OTEL_KEYS}
    # The site's cascade names an output format its theme (Docsy, absent here) defines.
    kept.setdefault("outputFormats", {})["LLMS"] = {
        "mediaType": "text/plain",
        "baseName": "llms",
        "isPlainText": True,
    }
    template = yaml.safe_load((source / "config/_default/module-template.yaml").read_text())
    mounts = [
        m
        for m in template["mounts"]
        if m.get("target") == "content" and (source / m["source"]).is_dir()
    ]
    return {
        "config/_default/hugo.yaml": yaml.safe_dump(kept, allow_unicode=True),
        "config/_default/module.yaml": yaml.safe_dump({"mounts": mounts}),
    }


def explain(hugo: dict[str, str], ours: dict[str, str]) -> str:
    lines = [f"hugo only: {p} {u}" for p, u in sorted(hugo.items()) if p not in ours]
    lines += [f"hetriever only: {p} {u}" for p, u in sorted(ours.items()) if p not in hugo]
    lines += [
        f"url differs: {p} hugo {u} hetriever {ours[p]}"
        for p, u in sorted(hugo.items())
        if p in ours and ours[p] != u
    ]
    return "\n".join(lines[:40])


def test_hugo_docs_v2(tmp_path: Path):
    hugo_binary()
    site = corpus_site(tmp_path, corpus_version("hugo-docs", "v2"), {"hugo.toml": HUGO_DOCS_CONFIG})
    hugo = hugo_pages(site, tmp_path / "hugo", clock=CLOCK)
    ours = hetriever_pages(site, store_settings(tmp_path), name="hugo-docs", now=NOW)
    # Pages with nothing to search (no title, no text) are the one rule of hetriever's own.
    empty = {p for p, reason in ours.skipped.items() if reason == "empty body"}
    # The one difference: a page's alias (time.AsTime's `/functions/time`) is the URL of
    # a section page. Hugo renders in parallel, so which of the two files ends at that URL
    # (the section page or the alias's redirect) changes from build to build: the page is
    # left out of both sides.
    over = ours.aliased_over()
    assert over == {"content/en/functions/time/_index.md": "content/en/functions/time/AsTime.md"}
    assert {p: u for p, u in hugo.items() if p not in empty and p not in over} == {
        p: u for p, u in ours.pages.items() if p not in over
    }, explain(hugo, ours.pages)
    reasons = Counter(r.split(":")[0].split(" (")[0] for r in ours.skipped.values())
    glossary = [p for p, r in ours.skipped.items() if "shown on /quick-reference/glossary/" in r]
    assert len(glossary) == 156 and reasons["expired"] == 2, reasons
    assert len(ours.pages) == 787
    text = ours.texts["content/en/quick-reference/glossary/_index.md"]
    assert "A _branch_ is a" not in text and "branch is a node with a page kind" in text


def test_opentelemetry_io_v2_site_per_language(tmp_path: Path):
    hugo_binary()
    source = corpus_version("opentelemetry-io", "v2-site")
    site = corpus_site(tmp_path, source, otel_config(source))
    hugo = hugo_pages(site, tmp_path / "hugo", clock=CLOCK)
    ours = hetriever_pages(site, store_settings(tmp_path), name="opentelemetry-io", now=NOW)
    empty = {p for p, reason in ours.skipped.items() if reason == "empty body"}
    languages = sorted({p.split("/")[1] for p in hugo} | {p.split("/")[1] for p in ours.pages})
    assert len(languages) == 11
    for lang in languages:
        theirs = {p: u for p, u in hugo.items() if p.split("/")[1] == lang and p not in empty}
        mine = {p: u for p, u in ours.pages.items() if p.split("/")[1] == lang}
        assert mine == theirs, f"{lang}:\n{explain(theirs, mine)}"
    expired = Counter(p.split("/")[1] for p, r in ours.skipped.items() if r.startswith("expired"))
    assert expired == {"en": 8, "ja": 4}
    assert (
        sum(len([p for p in ours.pages if p.split("/")[1] == lang]) for lang in languages) == 1662
    )
