"""What a person sees in a terminal: docs text exactly as written (never Rich markup, never a
raw control sequence), rounded scores, and no informational log lines unless asked.

A real small Hugo site in a real git repo, indexed and searched by the real CLI in a
subprocess; the TTY case in a real pseudo-terminal."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.helpers import commit_all, init_repo, write_files

HETRIEVER = Path(sys.executable).parent / "hetriever"
ESC = "\x1b"

PAGES = {
    "hugo.toml": 'baseURL = "https://docs.example.org/"\ntitle = "Brackets"\n',
    "content/docs/collector.md": (
        "---\ntitle: Collector receivers\n---\n\n"
        "## Defining receivers\n\n"
        "Each receiver is named type[/name] in the collector configuration, and a pipeline "
        "lists them as receivers: [zipkin] under service.\n"
    ),
    "content/docs/menus.md": (
        "---\ntitle: Menu entries\n---\n\n"
        "## Site configuration\n\n"
        "Declare each menu entry in a table named [[menus.main]] in the site configuration "
        "file, one table per entry.\n"
    ),
    "content/docs/markup.md": (
        '---\ntitle: "[bold]x[/bold] is not markup"\n---\n\n'
        "Terminal colours: the quokka sequence \x1b[31mred quokka\x1b[0m and a bell \x07 "
        "should never reach a terminal raw.\n"
    ),
}


@pytest.fixture(scope="module")
def site(tmp_path_factory, minilm_model_dir):
    root = tmp_path_factory.mktemp("terminal")
    repo = init_repo(root / "docs" / "bracket-docs")
    write_files(repo, PAGES)
    commit_all(repo, "pages with brackets and control characters")
    env = {
        **os.environ,
        "HETRIEVER_DOCS_ROOT": str(root / "docs"),
        "HETRIEVER_CHROMA_PATH": str(root / "chroma"),
        "HETRIEVER_STATE_DIR": str(root / "state"),
        "HETRIEVER_MODEL_DIR": str(minilm_model_dir),
        "HETRIEVER_LOG_LEVEL": "INFO",
    }  # the default: what a new user has
    env.pop("HETRIEVER_LOG_FORMAT", None)
    done = cli(env, "ingest", "--json")
    assert done.returncode == 0, done.stderr
    return root, env


def cli(env, *args):
    return subprocess.run(
        [str(HETRIEVER), *args], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "query,written",
    [
        ("can I define the same receiver type twice in the collector", "type[/name]"),
        ("can I define the same receiver type twice in the collector", "receivers: [zipkin]"),
        ("menu entry table in the site configuration", "[[menus.main]]"),
        ("is not markup terminal colours quokka", "[bold]x[/bold] is not markup"),
    ],
)
def test_search_prints_docs_text_as_written(site, query, written):
    _, env = site
    out = cli(env, "search", query, "-k", "3")
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert written in out.stdout, out.stdout


@pytest.mark.slow
def test_control_characters_from_the_docs_never_reach_the_terminal_raw(site):
    _, env = site
    out = cli(env, "search", "terminal colours quokka sequence", "-k", "1")
    assert out.returncode == 0, out.stderr
    assert ESC not in out.stdout and "\x07" not in out.stdout
    assert "\\x1b[31mred quokka\\x1b[0m" in out.stdout  # shown, escaped
    assert "\\x07" in out.stdout
    # --json keeps the text itself (JSON escapes it)
    found = json.loads(
        cli(env, "search", "terminal colours quokka sequence", "-k", "1", "--json").stdout
    )
    assert ESC + "[31mred quokka" in found["matches"][0]["content"]


@pytest.mark.slow
def test_scores_are_rounded_for_people_and_exact_in_json(site):
    _, env = site
    out = cli(env, "search", "menu entry table", "-k", "1")
    (line,) = [x for x in out.stdout.splitlines() if x.strip().startswith("score ")]
    score = line.split()[1]
    assert len(score.split(".")[1]) == 2, line  # e.g. 0.93
    found = json.loads(cli(env, "search", "menu entry table", "-k", "1", "--json").stdout)
    assert round(found["matches"][0]["score"], 2) == float(score)


@pytest.mark.slow
def test_a_search_logs_no_info_lines_unless_asked(site):
    _, env = site
    quiet = cli(env, "search", "menu entry table", "-k", "1")
    assert quiet.returncode == 0 and "search_done" not in quiet.stderr, quiet.stderr
    for args in (["-v", "search", "menu entry table"], ["search", "menu entry table", "-v"]):
        told = cli(env, *args)
        assert told.returncode == 0 and "search_done" in told.stderr, told.stderr
        assert "search_done" not in told.stdout  # the log stays on stderr
    # warnings still show: a repository asked for that has no BM25 side says so
    # (an error is always shown: an unknown repository)
    wrong = cli(env, "search", "menu", "-r", "bracket-doc")
    assert wrong.returncode == 2 and "unknown repositories: bracket-doc" in wrong.stderr


@pytest.mark.slow
def test_status_prints_as_written(site):
    _, env = site
    status = cli(env, "status")
    assert status.returncode == 0 and "bracket-docs" in status.stdout, status.stderr
    assert "complete" in status.stdout


def test_an_ingest_error_quoting_the_docs_is_printed_as_written(capsys):
    from hetriever.commands.ingest import print_ingest

    error = "content/docs/[[menus.main]].md: front matter [bold]x[/bold] type[/name] \x1b[2Jcleared"
    print_ingest([{"repository": "site-a", "ok": False, "error": error}], "/idx")
    out = capsys.readouterr().out
    assert (
        "site-a: content/docs/[[menus.main]].md: front matter [bold]x[/bold] type[/name] "
        "\\x1b[2Jcleared" in out
    ), out
    assert ESC not in out


def _run_in_pty(argv: list[str], env: dict, timeout: float = 240) -> str:
    """Run `argv` with a pseudo-terminal as its stdin, stdout and stderr; what it wrote."""
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        argv,
        env={**env, "COLUMNS": "160", "TERM": "xterm"},
        stdin=follower,
        stdout=follower,
        stderr=follower,
        start_new_session=True,
    )
    os.close(follower)
    chunks, deadline = [], time.monotonic() + timeout
    # A selector (epoll), not select(): a worker that has run many tests holds descriptors
    # above select()'s limit of 1024.
    watch = selectors.DefaultSelector()
    watch.register(leader, selectors.EVENT_READ)
    try:
        while time.monotonic() < deadline:
            ready = watch.select(timeout=1.0)
            if ready:
                try:
                    data = os.read(leader, 65536)
                except OSError:  # the child closed its end
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        else:
            pytest.fail(f"{argv} did not finish within {timeout} s")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        watch.close()
        os.close(leader)
    assert proc.returncode == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_in_a_terminal_the_bar_replaces_the_progress_lines_and_in_a_pipe_they_stay(
    tmp_path, minilm_model_dir
):
    repo = init_repo(tmp_path / "docs" / "bar-docs")
    write_files(
        repo,
        {
            **PAGES,
            **{
                f"content/docs/p{i}.md": f"---\ntitle: Page {i}\n---\n\nText of page {i}.\n"
                for i in range(5)
            },
        },
    )
    commit_all(repo)
    env = {
        **os.environ,
        "HETRIEVER_DOCS_ROOT": str(tmp_path / "docs"),
        "HETRIEVER_MODEL_DIR": str(minilm_model_dir),
        "HETRIEVER_LOG_LEVEL": "INFO",
    }
    env.pop("HETRIEVER_LOG_FORMAT", None)

    piped = cli(
        {
            **env,
            "HETRIEVER_CHROMA_PATH": str(tmp_path / "c1"),
            "HETRIEVER_STATE_DIR": str(tmp_path / "s1"),
        },
        "ingest",
    )
    assert piped.returncode == 0, piped.stderr
    assert "index_progress" in piped.stderr  # a log (CI, Prefect) shows the run moving
    assert "index_finished" in piped.stderr

    screen = _run_in_pty(
        [str(HETRIEVER), "ingest"],
        {
            **env,
            "HETRIEVER_CHROMA_PATH": str(tmp_path / "c2"),
            "HETRIEVER_STATE_DIR": str(tmp_path / "s2"),
        },
    )
    assert "index_progress" not in screen, screen
    assert "index_finished" in screen  # the other lines still show
    assert "indexing bar-docs" in screen  # the bar was drawn
    assert "full" in screen  # the table


def test_hetriever_lines_in_a_prefect_run_log_survive_watch():
    """`prefect deployment run --watch` prints a run's log lines as Rich markup: hetriever's
    events there (the stdlib sink's rendering) show docs text as written, never stop it."""
    import io
    import logging

    from rich.console import Console

    from hetriever.core.logs import configure_logging, get_logger

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    import structlog

    target = logging.getLogger("hetriever.test_watch")
    keep = Keep()
    target.addHandler(keep)
    target.setLevel(logging.INFO)
    previous = structlog.get_config()
    try:
        configure_logging("INFO", "console", sink="stdlib")
        get_logger("hetriever.test_watch").warning(
            "file_failed", path="content/[lang]/x.md", error="type[/name] [[menus.main]]"
        )
    finally:
        target.removeHandler(keep)
        structlog.configure(**previous)  # not this test's captured stderr, closed after it
    (record,) = records
    screen = io.StringIO()
    Console(file=screen, width=300).print(f"[dim]▪[/dim] 12:00:00 {record.getMessage()}")
    assert (
        "file_failed path=content/[lang]/x.md error=type[/name] [[menus.main]]" in screen.getvalue()
    ), screen.getvalue()
