"""The README's and the docs' code blocks work as written: each page's ```sh and ```python
blocks run in page order in one bash session (``tests/docs/blocks.py`` states the convention)
against a live stack, and the page passes when the session exits 0."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.docs.blocks import OWN_STACK, blocks, runnable, script
from tests.docs.conftest import BIN, ROOT, own_stack_env

PAGE_TIMEOUT_S = 300  # a page that starts Spark or a stack, on a machine other tests load
PAGES = sorted(
    str(p.relative_to(ROOT))
    for p in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    if runnable(p.read_text(encoding="utf-8"))
)


def test_the_convention() -> None:
    text = "\n".join(
        [
            "intro",
            "```sh",
            "echo one",
            "```",
            "```text",
            "shown",
            "```",
            "````python",
            "print('```')",
            "````",
            "```console",
            "$ make demo",
            "```",
            "```json",
            "{}",
            "```",
        ]
    )
    assert [b.lang for b in blocks(text)] == ["sh", "text", "python", "console", "json"]
    assert [(b.lang, b.code, b.line) for b in runnable(text)] == [
        ("sh", "echo one\n", 2),
        ("python", "print('```')\n", 8),
    ]


def test_the_readme_and_the_guides_have_blocks_that_run() -> None:
    assert "README.md" in PAGES
    assert {"docs/getting-started.md", "docs/guides/tenant.md", "docs/guides/admin.md"} <= set(
        PAGES
    )


def run_page(page: str, env: dict[str, str], scratch: Path) -> subprocess.CompletedProcess[str]:
    text = (ROOT / page).read_text(encoding="utf-8")
    proc = subprocess.Popen(
        ["bash", "-c", script(page, text, scratch)],
        cwd=scratch,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=PAGE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += f"\n(timed out after {PAGE_TIMEOUT_S} s)"
    finally:  # whatever the page left running in the background
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.timeout(PAGE_TIMEOUT_S + 60)
@pytest.mark.parametrize("page", PAGES)
def test_the_page_runs_as_written(
    page: str, live_stack: dict[str, str], sink_url: str, emq_shim: Path, tmp_path: Path
) -> None:
    own = OWN_STACK in (ROOT / page).read_text(encoding="utf-8")
    env = own_stack_env(tmp_path, sink_url, emq_shim) if own else live_stack
    try:
        done = run_page(page, env, tmp_path)
    finally:
        if own:
            subprocess.run(
                [str(BIN / "emq"), "stack", "down"],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                check=False,
                timeout=60,
            )
    logs = "".join(f"\n--- {p.name}\n{p.read_text()[-2000:]}" for p in tmp_path.glob("*.log"))
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-4000:]}{logs}"
