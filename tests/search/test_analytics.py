"""Search analytics over a real SQLite file: recording, retention, purge, the report, the
feed a server writes through, the /stats page and the artifact's Markdown (fast tier; the
served path is in tests/serve/test_analytics_served.py)."""

from __future__ import annotations

import sqlite3
import time
from html.parser import HTMLParser

import pytest

from flows.analytics_markdown import analytics_markdown, md
from hetriever.core.config import load_settings
from hetriever.core.models import RetrievalResult, SearchResult
from hetriever.search.analytics import (
    ANALYTICS_FILE,
    DAY,
    MAX_QUERY_CHARS,
    AnalyticsStore,
    OpenRecord,
    QueryRecord,
    nearest_similarity,
    open_store,
    record_quietly,
)
from hetriever.search.analytics_report import analytics_report, build_report
from hetriever.serve import stats_page
from hetriever.serve.analytics_feed import AnalyticsFeed, OpenRefused
from tests.support.small_disk import fill, small_tmpfs

HOSTILE = "<script>alert(1)</script> [/name] **x** | y"


def _match(score=0.8, dense=0.8, source="hybrid", url="/docs/a/"):
    return SearchResult(
        doc_id="d",
        content="text",
        metadata={"url": url},
        score=score,
        source=source,
        dense_score=dense,
    )


def _result(query, matches=()):
    return RetrievalResult(
        query=query, matches=list(matches), total_results=len(matches), search_time_ms=12.5
    )


def _record(query, matches=(), *, source="http", cold=False, at=None, **kw):
    record = QueryRecord.of(_result(query, matches), source=source, cold=cold, **kw)
    if at is not None:
        record.at = at
    return record


@pytest.fixture
def settings(tmp_path):
    return load_settings(
        state_dir=tmp_path / "state",
        chroma_path=tmp_path / "chroma",
        analytics=True,
        analytics_retention_days=30,
    )


def store_of(settings):
    return open_store(settings.resolved_state_dir, settings.analytics_retention_days)


def test_a_search_and_an_open_are_recorded_and_reported(settings):
    store = store_of(settings)
    found = _record("where function", [_match(), _match(url="/docs/b/")])
    store.record(
        [
            found,
            _record("quokka", []),
            _record("quokka", [], repositories=["team-notes"]),
            _record("vague words", [_match(dense=0.6)]),
            _record("where function", [_match()], source="mcp"),
        ]
    )
    store.record([], [OpenRecord(found.id, 2, "/docs/b/", time.time())])
    store.close()
    report = analytics_report(settings)
    assert report.queries == 5 and report.opened == 1
    (nothing,) = report.no_result
    assert (nothing["query"], nothing["count"], nothing["scope"]) == (
        "quokka",
        2,
        ["all", "team-notes"],
    )  # one search of all, one of team-notes
    assert [(q["query"], q["similarity"]) for q in report.weak] == [("vague words", 0.6)]
    assert report.opens == [{"query": "where function", "rank": 2, "url": "/docs/b/", "count": 1}]
    # a query whose HTTP results were never opened; one opened once is not listed, nor is
    # one that found nothing
    assert [q["query"] for q in report.unopened] == ["vague words"]
    assert report.top_queries[:2] == [
        {"query": "quokka", "count": 2, "no_result": 2, "weak": 0},
        {"query": "where function", "count": 2, "no_result": 0, "weak": 0},
    ]
    assert report.per_day[0]["queries"] == 5 and report.per_day[0]["no_result"] == 2
    assert [(r["source"], r["temperature"], r["count"]) for r in report.latency] == [
        ("http", "warm", 4),
        ("mcp", "warm", 1),
    ]


def test_an_open_of_a_rank_not_shown_or_an_unknown_query_is_not_kept(settings):
    store = store_of(settings)
    one = _record("one result", [_match()])
    store.record(
        [one],
        [
            OpenRecord(one.id, 1, "/docs/a/", time.time()),
            OpenRecord(one.id, 1, "/docs/a/", time.time()),  # again: one kept
            OpenRecord(one.id, 2, "/docs/x/", time.time()),  # beyond the results
            OpenRecord("no-such-id", 1, "/docs/a/", time.time()),
        ],
    )
    assert store.opens() == [("one result", 1, "/docs/a/")]
    store.close()


def test_query_text_is_kept_as_given_and_cut_to_the_cap(settings):
    store = store_of(settings)
    long = "é" * (MAX_QUERY_CHARS + 50)
    store.record([_record(HOSTILE), _record(long), _record("half \ud83d an emoji")])
    texts = [row["query"] for row in store.rows()]
    store.close()
    assert texts[0] == HOSTILE and texts[1] == "é" * MAX_QUERY_CHARS
    assert texts[2] == "half ? an emoji"  # a lone surrogate cannot fail the batch


def test_retention_drops_old_rows_and_their_opens(settings):
    store = store_of(settings)
    old = _record("last season", [_match()], at=time.time() - 31 * DAY)
    new = _record("this week", [_match()], at=time.time() - 2 * DAY)
    store.record([old, new], [OpenRecord(old.id, 1, "/docs/a/", time.time() - 31 * DAY)])
    # the write itself dropped what was past the 30 days, with its open
    assert [row["query"] for row in store.rows()] == ["this week"]
    assert store.opens() == []
    raw = sqlite3.connect(store.path)
    assert raw.execute("SELECT count(*) FROM queries").fetchone() == (1,)
    assert raw.execute("SELECT count(*) FROM opens").fetchone() == (0,)
    raw.close()
    store.close()
    assert analytics_report(settings, days=1).queries == 0  # a window inside the retention
    assert analytics_report(settings, days=7).queries == 1
    shorter = open_store(settings.resolved_state_dir, 1)  # the retention lowered to a day
    assert shorter.drop_expired() == 1 and shorter.rows() == []
    shorter.close()


def test_purge_empties_the_file(settings):
    store = store_of(settings)
    first = _record(HOSTILE, [_match()])
    store.record([first, _record("another")], [OpenRecord(first.id, 1, "/docs/a/", time.time())])
    assert store.purge() == 2
    assert store.rows() == [] and store.opens() == []
    store.close()
    data = (settings.resolved_state_dir / ANALYTICS_FILE).read_bytes()
    assert b"alert(1)" not in data  # vacuumed: the text is gone from the file too


def test_reading_with_analytics_off_creates_nothing(tmp_path):
    settings = load_settings(state_dir=tmp_path / "state", chroma_path=tmp_path / "chroma")
    assert not settings.analytics
    report = analytics_report(settings)
    assert report.queries == 0 and not report.enabled
    assert not (tmp_path / "state").exists()
    feed = AnalyticsFeed(settings, "http")
    assert feed.search(_result("q", [_match()]), {"results": [{"url": "/a/"}]}, 0.01, None) is None
    feed.flush()
    feed.close()
    assert not (tmp_path / "state").exists()


def test_a_locked_or_unwritable_file_costs_the_row_not_the_caller(settings):
    assert record_quietly(settings, _record("first"))
    holder = sqlite3.connect(settings.resolved_state_dir / ANALYTICS_FILE, timeout=0)
    holder.execute("BEGIN EXCLUSIVE")  # another writer holds the file
    started = time.perf_counter()
    assert not record_quietly(settings, _record("while locked"))
    assert time.perf_counter() - started < 5  # waited for the lock briefly, then gave up
    feed = AnalyticsFeed(settings, "http")
    assert feed.search(
        _result("served while locked", [_match()]),
        {"results": [{"url": "/docs/a/", "link": "/docs/a/"}]},
        0.01,
        None,
    )
    feed.flush()  # returns: the writer logged the failure
    holder.rollback()
    holder.close()
    feed.close()


@pytest.fixture
def full_disk(tmp_path):
    """A real 1 MiB tmpfs, filled to the last byte (root, to mount it; skipped otherwise)."""
    with small_tmpfs(tmp_path / "full-disk", "1m") as mount:
        (mount / "state").mkdir()
        fill(mount / "filler", block=4096)
        yield mount


def test_a_full_disk_costs_the_row_not_the_caller(tmp_path, full_disk):
    settings = load_settings(
        state_dir=full_disk / "state", chroma_path=tmp_path / "chroma", analytics=True
    )
    assert not record_quietly(settings, _record("nowhere to write"))
    feed = AnalyticsFeed(settings, "http")
    assert feed.search(_result("q", [_match()]), {"results": [{"url": "/a/"}]}, 0.01, None)
    feed.flush()  # the writer failed, logged it, and goes on
    assert feed.search(_result("q2", [_match()]), {"results": [{"url": "/a/"}]}, 0.01, None)
    feed.flush()
    feed.close()


def test_the_feed_accepts_only_opens_of_results_it_showed(settings):
    feed = AnalyticsFeed(settings, "http")
    shown = {
        "results": [
            {"url": "/docs/a/", "link": "https://example.org/docs/a/"},
            {"url": "/docs/b/", "link": "https://example.org/docs/b/"},
        ]
    }
    query_id = feed.search(
        _result("where", [_match(), _match(url="/docs/b/")]), shown, 0.02, ["sample-docs"]
    )
    assert isinstance(query_id, str) and len(query_id) >= 16
    with pytest.raises(OpenRefused) as unknown:
        feed.open("not-an-issued-id", 1, "/docs/a/")
    assert unknown.value.unknown
    for rank, url, why in (
        (3, "/docs/a/", "rank must be from 1 to 2"),
        (0, "/docs/a/", "rank must be from 1 to 2"),
        (True, "/docs/a/", "rank must be an integer"),
        (1, "/docs/b/", "not that of result 1"),
        (1, "x" * 5000, "url must be"),
    ):
        with pytest.raises(OpenRefused, match=why):
            feed.open(query_id, rank, url)
    assert feed.open(query_id, 2, "https://example.org/docs/b/")  # the link is accepted too
    assert not feed.open(query_id, 2, "/docs/b/")  # a second open of one result: not kept
    feed.flush()
    feed.close()
    report = analytics_report(settings)
    assert report.opens == [{"query": "where", "rank": 2, "url": "/docs/b/", "count": 1}]
    assert report.latency[0]["p50_ms"] == pytest.approx(20.0)


def test_similarity_is_the_nearest_result_and_an_exact_hit_is_never_weak():
    assert nearest_similarity([_match(dense=0.62), _match(dense=0.71)]) == 0.71
    assert nearest_similarity([_match(dense=None, source="exact"), _match(dense=0.5)]) == 1.0
    assert nearest_similarity([_match(dense=None, source="bm25")]) is None
    assert nearest_similarity([]) is None


class _Text(HTMLParser):
    """The page's text and its elements, as a browser's parser reads them."""

    def __init__(self):
        super().__init__()
        self.text, self.tags, self.ids = [], [], set()

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.ids.update(value for name, value in attrs if name == "id")

    def handle_data(self, data):
        self.text.append(data)


def _report(settings, rows):
    store = store_of(settings)
    store.record(rows)
    store.close()
    return analytics_report(settings)


def test_stats_page_is_svg_charts_with_every_query_escaped(settings):
    report = _report(
        settings,
        [
            _record(HOSTILE),
            _record(HOSTILE),
            _record("found", [_match()]),
            _record("cli one", source="cli", cold=True),
        ],
    )
    page = stats_page.render(report)
    parsed = _Text()
    parsed.feed(page)
    assert "script" not in parsed.tags  # the query is text, not an element
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert any(HOSTILE in t or HOSTILE[: stats_page.LABEL_CHARS - 1] in t for t in parsed.text)
    assert {
        "chart-per-day",
        "chart-top-queries",
        "chart-no-result",
        "chart-latency-warm",
        "chart-latency-cold",
    } <= parsed.ids
    assert page.count('<svg class="chart"') == 5
    assert 'class="bar no-result" data-value="3"' in page  # the day's three empty searches
    assert "style-src 'unsafe-inline'" in stats_page.HEADERS["Content-Security-Policy"]
    assert "script-src" not in stats_page.HEADERS["Content-Security-Policy"]  # none allowed


def test_artifact_markdown_escapes_query_text(settings):
    report = _report(settings, [_record(HOSTILE), _record("plain words", [_match()])])
    text = analytics_markdown(report)
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert md("a | b") == "a \\| b" and md("**x**") == "\\*\\*x\\*\\*"
    row = next(line for line in text.splitlines() if "alert" in line)
    assert row.count(" | ") == 3  # the query's own `|` breaks no cell (3 separators, 4 cells)


def test_an_empty_report_renders(tmp_path):
    settings = load_settings(state_dir=tmp_path / "s", chroma_path=tmp_path / "c")
    report = build_report([], [], enabled=False, retention_days=30, days=30, weak_below=0.7)
    assert 'id="analytics-off"' in stats_page.render(report)
    assert "is off" in analytics_markdown(report)
    assert analytics_report(settings).to_dict()["queries"] == 0


def test_analytics_settings_are_checked(tmp_path):
    from hetriever.core.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="analytics_retention_days"):
        load_settings(analytics_retention_days=0)
    with pytest.raises(ConfigurationError, match="analytics_weak_similarity"):
        load_settings(analytics_weak_similarity=1.5)
    assert isinstance(AnalyticsStore, type)
