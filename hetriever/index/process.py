"""The per-file step: one content file at a commit -> parse -> skip rules -> clean -> chunk.

Bad content never raises (it comes back as a skip with its reason); transient failures (I/O,
git) do, so a caller (the in-process map, or a Prefect task with retries) can try again.
Snippets (files under a `_`-prefixed folder) are not pages: pages include them, so a changed
snippet re-indexes the pages that include it (`expand_snippet_dependents`).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from hetriever.chunk.chunker import chunk_page
from hetriever.chunk.page_records import display_chunk, page_record, page_summary_lines
from hetriever.chunk.sections import keep_given_anchors
from hetriever.chunk.tokenizer import load_token_counter
from hetriever.clean.cleaner import clean_page
from hetriever.core import budget, faults
from hetriever.core.access import declared_level
from hetriever.core.clock import now_utc, utc_text
from hetriever.core.config import Settings
from hetriever.core.errors import SourceError
from hetriever.core.logs import get_logger
from hetriever.core.models import Block, ChangeKind, ChangeSet, Chunk, FileChange, SkippedFile
from hetriever.discover.changes import list_content_files
from hetriever.discover.git_objects import (
    FileReader,
    SkipFile,
    UnreadableFile,
    read_content_file,
    read_content_files,
    tree_entries,
)
from hetriever.discover.publish_rules import Decision, Section
from hetriever.discover.repositories import Repository
from hetriever.parse.links import LINKS_KEY, outbound_keys
from hetriever.parse.page import parse_page, skip_reason
from hetriever.parse.parsed_page import Page
from hetriever.parse.publish_pages import (
    ancestors,
    calls_glossary,
    content_root,
    expand_glossary,
    glossary_terms,
    shown_on,
    verdict,
)
from hetriever.store.catalog_windows import Window

log = get_logger(__name__)

# A cleaned page of more blocks (headings, paragraphs, code) than this is skipped before it is
# chunked: chunking it would cost seconds and hundreds of MB for thousands of tiny chunks.
# The pages of the shared corpora have at most ~300.
MAX_FILE_BLOCKS = 20_000


class FileReadError(SourceError):
    """git lists a file but cannot read it: the file fails (never a delete)."""


@dataclass
class FileOutcome:
    """What processing one file produced: chunks to store, or why it was skipped."""

    path: str
    chunks: list[Chunk] = field(default_factory=list)
    skipped: SkippedFile | None = None
    lines: int = 0
    # Set when the per-file step itself gave up (e.g. a task out of retries): the file keeps
    # its old chunks, is filed under IndexResult.failed, and the commit is not recorded.
    failed: str | None = None
    # The page's publish window (UTC ISO publish and expiry dates, "" for none) when a date
    # alone can change whether Hugo publishes it; the catalog keeps it for later runs.
    window: Window = None


def is_snippet_path(path: str, content_dir: str) -> bool:
    """Files under a `_`-prefixed directory of the content dir are snippets, not pages."""
    parts = PurePosixPath(path).parts
    base = len(PurePosixPath(content_dir).parts)
    return any(part.startswith("_") for part in parts[base:-1])


class IncludeResolver:
    """Resolves `{{% include "x" %}}` and path-named partials to snippet files at one commit.

    Hugo sites look snippets up in several ways: an absolute path under the content dir
    (`/_common/x.md`), a path relative to the content dir, or a name looked up in `_includes/`
    folders from the page's directory upwards (Docsy sites). Reads are cached per run.

    One resolver serves a run's concurrent per-file tasks (the flow's thread runner): a lock
    keeps them from reading the same file, or listing the tree, once each. It also holds the
    run's clock (`now`), against which publish and expiry dates are judged, and gives the
    publish rules a page's ancestor sections (`ancestors`).
    """

    def __init__(
        self, repo: Repository, commit: str, settings: Settings, *, now: dt.datetime | None = None
    ) -> None:
        self.repo = repo
        self.commit = commit
        self.settings = settings
        self.now = now or now_utc()
        self.content_root = PurePosixPath(repo.content_dir)
        self._languages = ["en"]
        self._pages: dict[str, Page | None] = {}
        # The content tree's files and symlinks, listed once; symlinks None: no listing.
        self._tree: tuple[frozenset[str], tuple[str, ...] | None] | None = None
        self._sections_read = False  # every `_index` file read in one batch (`ancestors`)
        self._reading = threading.Lock()
        self._files = FileReader(repo, commit)  # one git process for the run's reads

    def __getstate__(self) -> dict:
        # A Dask task runner pickles the resolver to its workers; each copy gets its own lock
        # and git process.
        state = dict(self.__dict__)
        del state["_reading"], state["_files"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reading = threading.Lock()
        self._files = FileReader(self.repo, self.commit)

    def close(self) -> None:
        """End the git process of the reads (a later read starts another)."""
        with self._reading:
            self._files.close()

    def for_page(self, page_path: str) -> Callable[[str], str | None]:
        return lambda name: self.resolve(name, page_path)

    def candidates(self, name: str, page_path: str) -> Iterable[str]:
        name = name.strip().strip("\"'")
        if not name:
            return
        with_ext = name if name.endswith((".md", ".markdown")) else f"{name}.md"
        roots = [self.content_root] + [self.content_root / lang for lang in self._languages]
        if self.repo.site is not None and self.repo.site.configured:
            roots += [PurePosixPath(r.source) for r in self.repo.site.roots]
        if name.startswith("/"):
            for root in roots:
                yield str(root / with_ext.lstrip("/"))
            return
        page_dir = PurePosixPath(page_path).parent
        # _includes/ folders from the page's directory up to the content root
        directory = page_dir
        while True:
            yield str(directory / "_includes" / with_ext)
            yield str(directory / with_ext)
            if directory == self.content_root or directory == directory.parent:
                break
            if not str(directory).startswith(str(self.content_root)):
                break
            directory = directory.parent
        for root in roots:
            yield str(root / with_ext)
            yield str(root / "_includes" / with_ext)

    def inherited_params(self, page_path: str) -> dict[str, str]:
        """`param` values the page inherits from its ancestor sections' `cascade` (the nearest
        wins; the page's own front matter wins over all, see `process_text`)."""
        roots = {str(self.content_root)}
        if self.repo.site is not None and self.repo.site.configured:
            roots.update(r.source.strip("/") for r in self.repo.site.roots)
        page = PurePosixPath(page_path)
        # A section's own cascade is for its descendants, not for itself.
        directory = page.parent.parent if page.stem == "_index" else page.parent
        inherited: dict[str, str] = {}
        while True:
            section = self._page(str(directory / "_index.md"))
            for key, value in (section.cascade if section is not None else {}).items():
                inherited.setdefault(key, value)
            if str(directory) in roots or directory == directory.parent:
                return inherited
            directory = directory.parent

    def ancestors(self, page_path: str) -> list[Section]:
        """The sections above a page, nearest first: (Hugo path, publish facts)."""
        if not self._sections_read:
            self._read_sections()
        return ancestors(page_path, self.read_page, self.repo.site, self.repo.content_dir)

    def _read_sections(self) -> None:
        """Every section page (`_index.*`) of the tree in one batched read: each page's
        ancestors are looked up, and a git process per section cost a run seconds."""
        paths = sorted(
            p
            for p in self.content_files()
            if PurePosixPath(p).name.startswith("_index.") and p not in self._pages
        )
        texts = (
            list(
                read_content_files(
                    self.repo, paths, self.commit, max_bytes=self.settings.max_file_bytes
                )
            )
            if paths
            else []
        )
        with self._reading:
            for path, text in texts:
                if path not in self._pages:
                    self._pages[path] = (
                        None
                        if isinstance(text, SkipFile)
                        else parse_page(
                            self.repo.name,
                            path,
                            text,
                            content_dir=self.repo.content_dir,
                            site=self.repo.site,
                        )
                    )
            self._sections_read = True

    def read_page(self, path: str) -> Page | None:
        """The file at `path` parsed (with the site, when the run read one), or None."""
        return self._page(path)

    def content_files(self) -> frozenset[str]:
        """Every file of the commit's tree (listed once per run; empty when git cannot list)."""
        if self._tree is None:
            with self._reading:
                self._absent(self.repo.content_dir.strip("/") + "/")
        return self._tree[0] if self._tree is not None else frozenset()

    def resolve(self, name: str, page_path: str) -> str | None:
        for candidate in self.candidates(name, page_path):
            if ".." in PurePosixPath(candidate).parts:
                continue
            page = self._page(candidate)
            if page is not None:
                return page.body
        return None

    def _absent(self, path: str) -> bool:
        """True when the commit's content tree surely has no file at `path`. Most candidates
        (`_includes/` at every level, every root) do not exist; one tree listing answers for
        them instead of a git process each (2-3 ms apiece, thousands per run on a big site).
        Paths outside the content dir, or below a symlink, are left to git to resolve."""
        content = self.repo.content_dir.strip("/")
        if content not in ("", ".") and not path.startswith(content + "/"):
            return False
        if self._tree is None:
            try:
                entries = tree_entries(self.repo, self.commit)
                self._tree = (
                    frozenset(entries),
                    tuple(p for p, (mode, _, _) in entries.items() if mode == "120000"),
                )
            except SourceError:  # no listing: git resolves every candidate, as before
                self._tree = (frozenset(), None)
        files, symlinks = self._tree
        if symlinks is None or path in files:
            return False
        return not any(path.startswith(link + "/") for link in symlinks)

    def _page(self, path: str) -> Page | None:
        """The file at `path` parsed, or None where there is none; read once per run."""
        if path in self._pages:  # no lock for what is cached: entries are only ever added
            return self._pages[path]
        with self._reading:
            if path not in self._pages and self._absent(path):
                self._pages[path] = None
            if path not in self._pages:
                try:
                    text = self._files.read(path, max_bytes=self.settings.max_file_bytes)
                    self._pages[path] = parse_page(
                        self.repo.name,
                        path,
                        text,
                        content_dir=self.repo.content_dir,
                        site=self.repo.site,
                    )
                except SkipFile:
                    self._pages[path] = None
            return self._pages[path]


def token_counter(settings: Settings):
    # load_token_counter keeps one counter per model (the "token counters" process cache)
    return load_token_counter(settings.embedding_model, settings.model_dir)


def page_extras(page, access: str) -> dict:
    """Chunk metadata beyond the chunker's own: the access level, and the linkTitle and
    aliases the exact-match index (and result display) use."""
    extras: dict = {"access_level": access}
    for key in ("linkTitle", "aliases"):
        value = page.front_matter.get(key)
        if value not in (None, "", []):
            extras[key] = value
    return extras


def process_text(
    repo: Repository,
    path: str,
    text: str,
    settings: Settings,
    *,
    include_resolver: Callable[[str], str | None] | None = None,
    inherited_params: Mapping[str, str] | None = None,
    parents: Sequence[Section] = (),
    now: dt.datetime | None = None,
    resolver: IncludeResolver | None = None,
) -> FileOutcome:
    """parse -> skip rules -> clean -> chunk for one file's text; `inherited_params` are what
    ancestor sections cascade to it (`IncludeResolver.inherited_params`), `parents` their
    publish facts (`IncludeResolver.ancestors`), `now` the run's clock; `resolver` (the
    run's) lets a page show other pages' text (the glossary)."""
    lines = text.count("\n") + 1
    if is_snippet_path(path, repo.content_dir):
        return FileOutcome(path, skipped=SkippedFile(path, "snippet (not a page)"), lines=lines)
    page = parse_page(repo.name, path, text, content_dir=repo.content_dir, site=repo.site)
    now = now or now_utc()
    decision = verdict(page, content_root(path, repo.site, repo.content_dir)[1], parents, repo.site)
    window = publish_window(decision)
    reason = publish_skip(page, decision, now, settings, resolver)
    if reason:
        return FileOutcome(path, skipped=SkippedFile(path, reason), lines=lines, window=window)
    if resolver is not None and page.body and calls_glossary(page.body):
        terms = glossary_terms(
            path, resolver.content_files(), resolver.read_page, repo.site, repo.content_dir, now
        )
        page.body = expand_glossary(page.body, terms)
    params = {**inherited_params, **page.params} if inherited_params else page.params
    blocks = clean_page(page.body, include_resolver=include_resolver, params=params, path=path)
    budget.check()
    if len(blocks) > MAX_FILE_BLOCKS:
        return FileOutcome(
            path,
            skipped=SkippedFile(
                path,
                f"too many blocks ({len(blocks)} headings, paragraphs and code blocks > "
                f"max {MAX_FILE_BLOCKS})",
            ),
            lines=lines,
            window=window,
        )
    access = declared_level(settings, repo.name, base=repo.version.base if repo.version else None)
    if settings.page_record == "prefix" and page_summary_lines(page):
        blocks = [Block("paragraph", "\n".join(page_summary_lines(page))), *blocks]
    chunks = chunk_page(
        page,
        blocks,
        counter=token_counter(settings),
        max_tokens=settings.chunk_tokens,
        min_tokens=settings.min_chunk_tokens,
        extra_metadata=page_extras(page, access),
    )
    if len(chunks) > settings.max_file_chunks:
        return FileOutcome(
            path,
            skipped=SkippedFile(
                path,
                f"too many chunks ({len(chunks)} > max {settings.max_file_chunks}, "
                "HETRIEVER_MAX_FILE_CHUNKS)",
            ),
            lines=lines,
            window=window,
        )
    keep_given_anchors(chunks, blocks)
    if settings.page_record == "chunk":
        record = page_record(
            page,
            counter=token_counter(settings),
            max_tokens=settings.chunk_tokens,
            extra_metadata=page_extras(page, access),
        )
        chunks = [record, *chunks] if record is not None else chunks
    if not chunks:
        return FileOutcome(
            path, skipped=SkippedFile(path, "empty body"), lines=lines, window=window
        )
    links = page_links(page, repo)
    if links:  # on the chunk that stands for the page, as its titles are (followers read it)
        display_chunk(chunks).metadata[LINKS_KEY] = list(links)
    return FileOutcome(path, chunks=chunks, lines=lines, window=window)


def publish_window(decision: Decision) -> Window:
    """What the catalog keeps so a later run sees a date pass: None when no date can change
    whether the page is published."""
    if not decision.timed:
        return None
    return utc_text(decision.publish_at), utc_text(decision.expire_at)


def publish_skip(
    page: Page,
    decision: Decision,
    now: dt.datetime,
    settings: Settings,
    resolver: IncludeResolver | None,
) -> str | None:
    """Why Hugo publishes no page of its own here (`hetriever.discover.publish_rules`), or why it is
    no page at all (`parse.skip_reason`: outside the site, a disabled kind, a snippet, a
    redirect stub); None to index it. A term shown on its section's page says where."""
    if not page.in_site or page.kind_disabled:
        return skip_reason(page, include_drafts=True)
    reason = decision.reason(now)
    if reason == "draft" and settings.include_drafts:
        reason = None
    if reason and reason.startswith("not rendered") and resolver is not None:
        shown = shown_on(page.file_path, resolver.read_page)
        if shown is not None:
            reason += f"; its text is shown on {shown.url}"
    return reason or skip_reason(page, include_drafts=True)


def page_links(page: Page, repo: Repository) -> tuple[str, ...]:
    """What the page links to, as `hetriever.parse.links` keys."""
    located = repo.site.locate(page.file_path) if repo.site is not None else None
    relative = located.relative if located is not None else ""
    root = (
        page.file_path[: len(page.file_path) - len(relative)].rstrip("/")
        if relative and page.file_path.endswith(relative)
        else repo.content_dir
    )
    return tuple(outbound_keys(page.body, page.file_path, page.url, root))


def process_file(
    repo: Repository,
    path: str,
    commit: str,
    settings: Settings,
    *,
    resolver: IncludeResolver | None = None,
    text: str | SkipFile | None = None,
) -> FileOutcome:
    """Turn one file at `commit` into chunks; `text` is its content when already read
    (batch reads are several times cheaper than one git process per file), else it is read.

    Bad content never raises (it comes back as a skip); transient failures (I/O, git) do, so
    the caller can retry them. Chunks carry no run time (it would rewrite every unchanged
    chunk on every run).
    """
    faults.check("process_file", path)
    try:
        if text is None:
            text = read_content_file(repo, path, commit, max_bytes=settings.max_file_bytes)
        elif isinstance(text, SkipFile):
            raise text
    except UnreadableFile as unreadable:  # a read error: the file fails, its chunks stay
        raise FileReadError(unreadable.reason) from None
    except SkipFile as skip:
        log.warning("file_skipped", repository=repo.name, path=path, reason=skip.reason)
        return FileOutcome(path, skipped=SkippedFile(path, skip.reason))
    resolver = resolver or IncludeResolver(repo, commit, settings)
    return safe_process_text(repo, path, text, settings, resolver=resolver)


def safe_process_text(
    repo: Repository, path: str, text: str, settings: Settings, *, resolver: IncludeResolver
) -> FileOutcome:
    """`process_text` that turns any error into a skip."""
    try:
        with budget.file_budget(settings.file_seconds):
            # Only a page that calls `param` needs its ancestors' cascades read.
            inherited = resolver.inherited_params(path) if "param" in text else None
            return process_text(
                repo,
                path,
                text,
                settings,
                include_resolver=resolver.for_page(path),
                inherited_params=inherited,
                parents=resolver.ancestors(path),
                now=resolver.now,
                resolver=resolver,
            )
    except budget.FileBudgetExceeded as exc:  # this file fails alone; the run goes on
        reason = f"{exc.message}, the limit of HETRIEVER_FILE_SECONDS; the next ingest retries it"
        log.error("file_failed", repository=repo.name, path=path, error=reason)
        return FileOutcome(path, failed=reason)
    except Exception as exc:  # a bad file is logged and skipped; it never stops the run
        log.error(
            "file_failed", repository=repo.name, path=path, error=f"{type(exc).__name__}: {exc}"
        )
        return FileOutcome(path, skipped=SkippedFile(path, f"error: {type(exc).__name__}: {exc}"))


def expand_snippet_dependents(repo: Repository, change_set: ChangeSet) -> ChangeSet:
    """Pages whose text depends on another changed file are re-indexed too: those that include
    a changed snippet, and those below a changed section page (`_index.md`, whose `cascade`
    may give their `param` calls a value). Unchanged chunks are reused, so a page whose text
    did not change costs its processing only."""
    if change_set.mode != "incremental":
        return change_set
    changed = [p for c in change_set.changes for p in (c.path, c.old_path) if p]
    snippets = {PurePosixPath(p).stem for p in changed if is_snippet_path(p, repo.content_dir)}
    sections = {
        str(PurePosixPath(p).parent) + "/"
        for p in changed
        if PurePosixPath(p).stem == "_index" and not is_snippet_path(p, repo.content_dir)
    }
    if not snippets and not sections:
        return change_set
    already = {c.path for c in change_set.changes}
    candidates = [
        p
        for p in list_content_files(repo, change_set.new_commit)
        if p not in already and not is_snippet_path(p, repo.content_dir)
    ]
    added: list[FileChange] = []
    for path, text in read_content_files(repo, candidates, change_set.new_commit, max_bytes=10**9):
        if isinstance(text, SkipFile) or ("{{%" not in text and "{{<" not in text):
            continue
        if any(name in text for name in snippets) or (
            "param" in text and any(path.startswith(s) for s in sections)
        ):
            added.append(FileChange(ChangeKind.MODIFIED, path))
    if added:
        log.info(
            "snippet_dependents",
            repository=repo.name,
            snippets=sorted(snippets),
            sections=sorted(sections),
            pages=len(added),
        )
    change_set.changes.extend(added)
    change_set.include_dependents.extend(c.path for c in added)
    return change_set
