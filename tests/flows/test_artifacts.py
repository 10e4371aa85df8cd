"""The ingest artifacts' markdown, as a person reads it in the Prefect UI (pure functions)."""

from __future__ import annotations

from flows.artifacts import (
    repository_markdown,
    skip_reason_kind,
    skipped_markdown,
    summary_markdown,
)
from hetriever.core.models import IndexResult, SkippedFile

HINT = "fix the failing files (see the log) and run again"


def failing_result() -> IndexResult:
    long_reason = "embedding failed: " + "x" * 200 + f" ({HINT})"
    return IndexResult(
        repository="hugo-docs",
        mode="incremental",
        old_commit="a" * 40,
        new_commit="b" * 40,
        files_modified=513,
        files_include_dependent=44,
        files_indexed=556,
        skipped=[
            SkippedFile(f"content/_common/s{i}.md", "snippet (not a page)") for i in range(100)
        ]
        + [SkippedFile("content/x.md", "draft"), SkippedFile("content/big.md", "too large: 3 MB")],
        failed=[SkippedFile("content/functions/where.md", long_reason)],
    )


def test_failures_come_first_with_the_whole_message_and_hint():
    text = repository_markdown(failing_result(), runs=[])
    assert text.startswith("# Ingest of hugo-docs: FAILED")
    assert text.index("content/functions/where.md") < text.index("## This run")
    assert HINT in text and "x" * 200 in text  # not cut at 80 characters


def test_skips_are_summarised_by_reason_and_include_dependents_counted_apart():
    text = repository_markdown(failing_result(), runs=[])
    assert "| snippet (not a page) | 100 |" in text and "| too large | 1 |" in text
    assert "content/_common/s0.md" not in text  # the list is the -skipped artifact
    assert "| files added / modified / deleted / renamed | 0 / 513 / 0 / 0 |" in text
    assert "| pages re-indexed because an included snippet changed | 44 |" in text
    listing = skipped_markdown(failing_result())
    assert "content/_common/s99.md" in listing and "too large: 3 MB" in listing
    assert skip_reason_kind("too large: 3 MB") == "too large"


def test_run_history_and_a_summary_with_failed_repositories_first():
    runs = [
        {
            "started_at": "2026-11-23T20:00:00+00:00",
            "mode": "full",
            "new_commit": "c" * 40,
            "outcome": "ok",
            "error": "",
            "counts": {"chunks_written": 2847, "total_seconds": 42.71},
        }
    ]
    text = repository_markdown(failing_result(), runs)
    assert "## Recent runs" in text and "| full | cccccccccccc | ok | 2847 |" in text
    summary = summary_markdown(
        [
            {"repository": "a-docs", "ok": True, "mode": "noop"},
            {"repository": "b-docs", "ok": False, "error": "x" * 150 + " (hint: do y)"},
        ]
    )
    lines = summary.splitlines()
    assert lines[2].startswith("| b-docs | FAILED: ") and "(hint: do y)" in lines[2]


def test_the_artifacts_say_what_waits_upstream():
    behind = {
        "upstream_ref": "origin/main",
        "upstream_commit": "c" * 40,
        "behind_upstream": 3,
        "upstream_error": "",
    }
    text = repository_markdown(failing_result(), runs=[], waiting=behind)
    assert "| upstream | origin/main at cccccccccccc: behind by 3 commits |" in text
    current = {**behind, "behind_upstream": 0}
    assert "origin/main at cccccccccccc: up to date" in repository_markdown(
        failing_result(), runs=[], waiting=current
    )
    summary = summary_markdown(
        [
            {"repository": "hugo-docs", "ok": True, "mode": "noop", **behind},
            {"repository": "local-docs", "ok": True},
        ]
    )
    assert "behind by 3 commits |" in summary and "| local-docs | ok |" in summary
    unknown = {**behind, "behind_upstream": None, "upstream_error": "origin/HEAD is unknown"}
    assert "origin/main: unknown (origin/HEAD is unknown)" in repository_markdown(
        failing_result(), runs=[], waiting=unknown
    )
