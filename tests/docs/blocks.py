"""The code blocks of the docs and the README, and the script that runs one page's blocks.

The convention every page is written against:

* ```` ```sh ```` blocks are executed, in page order, in one bash session per page
  (``set -euo pipefail``), so a variable one block exports is seen by the next;
* ```` ```python ```` blocks are written to files and run, at their place in that order, by the
  same session (so they see what the shell blocks exported), in the page's scratch directory;
* every other block (```` ```text ````, ```` ```json ````, ```` ```console ````, ...) is shown,
  not run.

A page runs against a live stack whose addresses are exported (``EMQ_API_URL``,
``EMQ_ADMIN_TOKEN``, ``EMQ_REDIS_URL``, ``EMQ_ZK_HOSTS``, ``EMQ_PUSH_ALLOW_CIDRS``, and
``EMQ_SINK_URL``, a receiver answering 200 to any request). A page carrying the line
``<!-- docs-test: own-stack -->`` starts its own stack instead: the same variables point at
free ports where nothing runs yet (``EMQ_SINK_URL`` still answers).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

RUN = ("sh", "python")
OWN_STACK = "<!-- docs-test: own-stack -->"
# A fence opens at the start of a line: three or more backticks, then the block's language.
_FENCE = re.compile(
    r"^(?P<fence>`{3,})(?P<lang>[\w+-]*)[^\n]*\n(?P<code>.*?)^(?P=fence)\s*$", re.M | re.S
)


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int  # where the block starts in its page (1-based), for failure messages


def blocks(text: str) -> list[Block]:
    """Every fenced block of a Markdown text, in order."""
    return [
        Block(m["lang"], m["code"], text.count("\n", 0, m.start()) + 1)
        for m in _FENCE.finditer(text)
    ]


def runnable(text: str) -> list[Block]:
    """The blocks that are run: ```sh and ```python."""
    return [b for b in blocks(text) if b.lang in RUN]


def script(page: str, text: str, scratch: Path) -> str:
    """The bash script that runs a page's blocks in order; Python blocks are written into
    ``scratch`` as ``block_<line>.py`` and run from it."""
    lines = ["set -euo pipefail", f"cd {scratch}"]
    for b in runnable(text):
        lines.append(f"echo '::: {page}:{b.line} ({b.lang})' >&2")
        if b.lang == "sh":
            lines.append(b.code)
        else:
            path = scratch / f"block_{b.line}.py"
            path.write_text(b.code)
            lines.append(f"python {path.name}")
    return "\n".join(lines) + "\n"
