"""Fenced code blocks: the first pass of cleaning a page body, and of filling a snippet.

Fences are cut out before anything else reads the text, so nothing looks inside them that
Hugo would not (it expands only shortcodes there).
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"([ \t]*)(`{3,}|~{3,})(.*)")
_QUOTE_MARK = re.compile(r"[ \t]{0,3}>[ \t]?")


def _unquote(line: str, depth: int) -> str | None:
    """`line` without `depth` block-quote markers, or None when it has fewer."""
    pos = 0
    for _ in range(depth):
        m = _QUOTE_MARK.match(line, pos)
        if not m:
            return None
        pos = m.end()
    return line[pos:]


def _fence_open(line: str) -> tuple[int, str, int] | None:
    """(quote depth, fence char, fence length) if `line` opens a fenced code block."""
    depth = 0
    body = line
    if line.lstrip().startswith(">"):
        while True:
            m = _QUOTE_MARK.match(body)
            if not m:
                break
            depth += 1
            body = body[m.end() :]
    m = _FENCE.fullmatch(body.rstrip("\n"))
    if not m:
        return None
    fence = m.group(2)
    if fence[0] == "`" and "`" in m.group(3):
        return None  # CommonMark: a backtick fence's info string holds no backtick
    return depth, fence[0], len(fence)


def split_fences(text: str) -> list[tuple[str, str]]:
    """Split Markdown into ("md", text) and ("code", fenced block) pieces, in order.

    A fence may be indented, in a block quote (its quote markers are dropped from the code), or
    never closed (then it runs to the end, as CommonMark renders it).
    """
    if "```" not in text and "~~~" not in text:
        return [("md", text)] if text else []
    lines = text.splitlines(keepends=True)
    out: list[tuple[str, str]] = []
    md_start = i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        if "```" not in line and "~~~" not in line:
            i += 1
            continue
        opened = _fence_open(line)
        if opened is None:
            i += 1
            continue
        depth, char, length = opened
        code = [_unquote(line, depth) or line if depth else line]
        j = i + 1
        while j < n:
            current = _unquote(lines[j], depth) if depth else lines[j]
            if current is None:
                break  # the block quote holding the fence ended
            code.append(current)
            j += 1
            stripped = current.strip()
            if (
                stripped
                and stripped[0] == char
                and stripped.count(char) == len(stripped)
                and len(stripped) >= length
            ):
                break
        if md_start < i:
            out.append(("md", "".join(lines[md_start:i])))
        block = "".join(code)
        out.append(("code", block[:-1] if block.endswith("\n") else block))
        i = md_start = j
    if md_start < n:
        out.append(("md", "".join(lines[md_start:])))
    return out
