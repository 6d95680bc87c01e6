"""Text from outside the harness made safe to show: no character of it can drive a terminal.

An agent's output, a bundle author's contract (its host, agent label and command, model names,
currency) and anything else the harness did not write itself pass through :func:`inert`
before a terminal, ``report.md`` or ``report.html`` shows them.
"""

from __future__ import annotations

import re
from typing import Final

# C0 and C1 controls, line and paragraph separators, and every bidirectional mark, embedding,
# override and isolate (U+061C, U+200E and U+200F reorder text as the others do).
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def inert(text: str) -> str:
    """``text`` with every control character but newline and tab written as an escape, so that
    output an agent wrote cannot move the cursor, recolour or retitle the reader's terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text.replace("\r\n", "\n"))
