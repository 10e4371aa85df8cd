"""README's recipe and its by-hand update line, run as written by bash in a fresh home (no
test-wide git configuration): a local repo added as a submodule, a push to it, the update
line, and what `ingest` and `status` say when a checkout is behind its upstream."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.helpers import REPO_ROOT

PAGE = "---\ntitle: {title}\n---\n\n# {title}\n\nThe {title} page tells how {word} works.\n"


def readme() -> str:
    return (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def recipe() -> list[str]:
    """The recipe's lines, but the one that clones from the network."""
    text = readme()
    start = text.index("The recipe builds a parent repo")
    block = text[
        text.index("```sh\n", start) + 6 : text.index("```", text.index("```sh\n", start) + 6)
    ]
    return [line for line in block.splitlines() if line.strip() and "https://" not in line]


def update_line() -> str:
    (line,) = re.findall(
        r"`(git -C ~/docs-parent submodule update --remote && hetriever "
        r"ingest)`",
        readme(),
    )
    return line


@pytest.fixture
def home(tmp_path, minilm_model_dir):
    """A user's home with a Hugo site repo at ~/src/site-a, and the shell environment."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "HETRIEVER_", "XDG_"))}
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="a",
        GIT_AUTHOR_EMAIL="a@example.invalid",
        GIT_COMMITTER_NAME="a",
        GIT_COMMITTER_EMAIL="a@example.invalid",
        HETRIEVER_MODEL_DIR=str(minilm_model_dir),
    )
    site = home / "src" / "site-a"
    (site / "content").mkdir(parents=True)
    (site / "content" / "_index.md").write_text(PAGE.format(title="Quokka home", word="quokka"))
    shell(
        env,
        "git init -q -b main ~/src/site-a && git -C ~/src/site-a add -A && "
        "git -C ~/src/site-a commit -qm site",
    )
    return home, env


def shell(env, script: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    return done


def push_page(env, word: str) -> None:
    done = shell(
        env,
        f"printf '%s' '{PAGE.format(title=word.title(), word=word)}' > "
        f"~/src/site-a/content/{word}.md && git -C ~/src/site-a add -A && "
        f"git -C ~/src/site-a commit -qm {word}",
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_the_readme_update_line_works_as_written_after_the_recipe(home):
    home_dir, env = home
    # the recipe's lines in one shell, as a user pastes them (set -e: each must succeed)
    built = shell(env, "set -e\n" + "\n".join(recipe()))
    assert built.returncode == 0, built.stdout + built.stderr
    assert "site-a" in built.stdout  # `hetriever status` listed it
    env = {
        **env,
        "PATH": f"{REPO_ROOT / '.venv' / 'bin'}:{env['PATH']}",
        "HETRIEVER_DOCS_ROOT": str(home_dir / "docs-parent"),
    }

    push_page(env, "platypus")
    updated = shell(env, update_line(), cwd=home_dir)
    assert updated.returncode == 0, updated.stderr
    assert "incremental" in updated.stdout, updated.stdout
    found = shell(env, "hetriever search platypus -k 1", cwd=home_dir)
    assert "Platypus" in found.stdout, found.stdout + found.stderr

    # fetched but not checked out: ingest has nothing new, and says what to run
    push_page(env, "echidna")
    assert shell(env, "git -C ~/docs-parent/site-a fetch -q").returncode == 0
    noop = shell(env, "hetriever ingest", cwd=home_dir)
    command = (
        f"git -C {home_dir / 'docs-parent'} submodule update --remote site-a && hetriever ingest"
    )
    assert noop.returncode == 0 and "noop" in noop.stdout, noop.stdout + noop.stderr
    assert (
        "hetriever: note: site-a: checkout is behind its upstream (origin/HEAD has 1 "
        f"more commit); run `{command}`"
    ) in noop.stderr, noop.stderr
    status = shell(env, "hetriever status", cwd=home_dir)
    assert "site-a: checkout is behind its upstream" in status.stderr, status.stderr
    assert "behind by 1" in status.stdout

    # the line it names, run as printed, brings the commit in
    done = shell(env, command, cwd=home_dir)
    assert done.returncode == 0 and "incremental" in done.stdout, done.stdout + done.stderr
    after = shell(env, "hetriever ingest", cwd=home_dir)
    assert "noop" in after.stdout and "behind" not in after.stderr, after.stderr


@pytest.mark.slow
def test_without_the_recipe_s_config_line_the_update_fails_and_status_says_why(home):
    """Why the recipe sets protocol.file.allow in the submodule: git refuses its submodule
    update; a parent built without it is told a line that sets it and updates."""
    home_dir, env = home
    lines = [
        line
        for line in recipe()
        if "config protocol.file.allow" not in line and "hetriever" not in line
    ]
    assert shell(env, "set -e\n" + "\n".join(lines)).returncode == 0
    push_page(env, "platypus")
    failed = shell(env, "git -C ~/docs-parent submodule update --remote", cwd=home_dir)
    assert failed.returncode != 0 and "transport 'file' not allowed" in failed.stderr

    # hetriever's own fetch is not a submodule command: `status --fetch` sees the commit,
    # and names the line that brings it in, which sets what git needs first
    env = {
        **env,
        "PATH": f"{REPO_ROOT / '.venv' / 'bin'}:{env['PATH']}",
        "HETRIEVER_DOCS_ROOT": str(home_dir / "docs-parent"),
    }
    assert shell(env, "hetriever ingest", cwd=home_dir).returncode == 0
    status = shell(env, "hetriever status --fetch", cwd=home_dir)
    sub, parent = home_dir / "docs-parent" / "site-a", home_dir / "docs-parent"
    command = (
        f"git -C {sub} config protocol.file.allow always && git -C {parent} "
        "submodule update --remote site-a && hetriever ingest"
    )
    assert (
        f"checkout is behind its upstream (origin/HEAD has 1 more commit); run `{command}`"
        in status.stderr
    ), status.stderr
    done = shell(env, command, cwd=home_dir)
    assert done.returncode == 0 and "incremental" in done.stdout, done.stdout + done.stderr
    # from now on the README's line works as written
    push_page(env, "echidna")
    updated = shell(env, update_line(), cwd=home_dir)
    assert updated.returncode == 0 and "incremental" in updated.stdout, updated.stderr
