"""Text from the docs on a terminal: shown, never obeyed.

A page's title, path or passage may hold control characters (an ESC that starts a terminal
sequence, a bell, a carriage return that overwrites the line); written to a terminal they
would act. `terminal_safe` writes each as `\\xNN` instead: the command line's output and its
log lines on stderr go through it.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, C1 controls (U+009B is a one-character CSI).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: object) -> str:
    """`text` with every control character but tab and newline written as `\\xNN`."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))
