"""Snippets a page includes: where a path-named partial's file may be, and how a snippet's
template variables are filled (`hetriever.clean.shortcodes` expands them in place)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from hetriever.clean.fences import split_fences


def partial_names(name: str) -> list[str]:
    """Where a path-named partial's snippet may be: the name itself, then (as Docsy-style
    sites do: `docs/languages/exporters/intro` includes `_includes/exporters/intro.md` from
    the page's folder upwards) its shorter tails inside `_includes/` folders only."""
    parts = name.strip("/").split("/")
    return [name] + ["_includes/" + "/".join(parts[i:]) for i in range(1, len(parts))]


# Sites whose include shortcode fills a snippet like a template (OpenTelemetry's does:
# `{{ $1 }}`, `{{ $name }}`, and `{{ if $x }}` / `{{ if not $x }}` ... `{{ end }}` lines).
_IF_LINE = re.compile(r"\{\{-?\s*if(\s+not)?\s+\$([\w.]+)\s*-?\}\}")
_END_LINE = re.compile(r"\{\{-?\s*end\s*-?\}\}")
_TEMPLATE_VAR = re.compile(r"\{\{-?\s*\$\.?([\w.]+)\s*-?\}\}")
# The same outside code spans, which are matched first and kept.
_TEMPLATE_VAR_IN_TEXT = re.compile(r"(`+)(?:(?!\1).)*?\1|" + _TEMPLATE_VAR.pattern)


def fill_template(text: str, args: Mapping[str, str]) -> str:
    """Fill a snippet's template variables as the site's include does.

    A given argument becomes its value everywhere. Outside code, a variable the site computes
    from data we do not have (a language's display name, a release status) becomes nothing
    and its `if` block is kept, the `if not` one dropped (the snippet is written for the pages
    that set it). Code keeps what is not given, and `if`/`end` lines count only outside code
    and in pairs: Hugo's own docs show Go templates in snippets, and those stay as written.
    """
    lines: list[tuple[bool, str]] = []  # (in code, line)
    for kind, segment in split_fences(text):
        if kind == "code":
            lines.append((True, segment + "\n" if not segment.endswith("\n") else segment))
        else:
            lines.extend((False, line) for line in segment.splitlines(keepends=True))
    dropped = _dropped_lines(lines, args)
    out: list[str] = []
    for i, (in_code, line) in enumerate(lines):
        if i in dropped:
            continue
        if "{{" not in line:
            out.append(line)
        elif in_code:
            out.append(_TEMPLATE_VAR.sub(lambda m: args.get(m.group(1), m.group(0)), line))
        else:
            out.append(
                _TEMPLATE_VAR_IN_TEXT.sub(
                    lambda m: m.group(0) if m.group(1) else args.get(m.group(2), ""), line
                )
            )
    filled = "".join(out)
    return filled if text.endswith("\n") else filled.rstrip("\n")


def _dropped_lines(lines: list[tuple[bool, str]], args: Mapping[str, str]) -> set[int]:
    """Indices of lines an `if` removes: its `if` and `end` lines always, its body when the
    condition does not hold. Unpaired `if`/`end` lines are text."""
    dropped: set[int] = set()
    open_ifs: list[tuple[int, bool]] = []  # (line index, holds)
    for i, (in_code, line) in enumerate(lines):
        if in_code or "{{" not in line:
            continue
        stripped = line.strip()
        if m := _IF_LINE.fullmatch(stripped):
            negated, name = bool(m.group(1)), m.group(2)
            holds = bool(args.get(name)) if name in args else True
            open_ifs.append((i, holds != negated))
        elif _END_LINE.fullmatch(stripped) and open_ifs:
            start, holds = open_ifs.pop()
            dropped.update((start, i) if holds else range(start, i + 1))
    return dropped
