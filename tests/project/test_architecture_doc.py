"""docs/architecture.md is checked against the code: every module it names exists, every
module of the package is named in it, every entry point it lists is defined in its module,
and each idea of "One owner per idea" names an owner that exists."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("hetriever", "flows", "tasks", "deployments", "webhooks")
ROW = re.compile(r"^\| `(?P<path>[\w/]+\.py)` \|(?P<owns>.*)\|(?P<entries>[^|]*)\|\s*$")
NAME = re.compile(r"`([A-Za-z_][\w.]*)(?:\(\))?`")


def _rows() -> list[tuple[str, str]]:
    rows = []
    for line in DOC.read_text().splitlines():
        match = ROW.match(line)
        if match:
            rows.append((match["path"], match["entries"]))
    return rows


def _module(path: str):
    return importlib.import_module(path.removesuffix(".py").replace("/", "."))


def test_every_module_named_exists_and_every_module_is_named():
    named = {path for path, _ in _rows()}
    assert named, "no module table found in docs/architecture.md"
    missing = sorted(p for p in named if not (ROOT / p).is_file())
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"
    modules = {
        str(p.relative_to(ROOT))
        for package in ("hetriever",)
        for p in (ROOT / package).rglob("*.py")
        if p.name != "__init__.py" and "static" not in p.parts
    }
    unnamed = sorted(modules - named)
    assert not unnamed, f"modules docs/architecture.md does not describe: {unnamed}"


def test_every_entry_point_listed_is_defined_in_its_module():
    wrong = []
    for path, entries in _rows():
        module = _module(path)
        for name in NAME.findall(entries.split("(through", 1)[0]):
            head = name.split(".")[0]
            if not hasattr(module, head):
                wrong.append(f"{path}: {name}")
    assert not wrong, f"entry points not defined where docs/architecture.md says: {wrong}"


def test_each_idea_has_one_owner_that_exists():
    text = DOC.read_text()
    section = text.split("## One owner per idea", 1)
    assert len(section) == 2, "docs/architecture.md has no 'One owner per idea' section"
    body = section[1].split("\n## ", 1)[0]
    owners = re.findall(
        r"^\| (?P<idea>[^|]+) \| `(?P<owner>[\w/]+\.py)(?::(?P<name>\w+))?` \|", body, re.M
    )
    assert len(owners) >= 10
    for idea, path, name in owners:
        assert (ROOT / path).is_file(), f"{idea.strip()}: {path} does not exist"
        if name:
            assert hasattr(_module(path), name), f"{idea.strip()}: {path} has no {name}"
