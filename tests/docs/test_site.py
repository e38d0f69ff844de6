"""The documentation site builds with ``mkdocs build --strict`` (a broken link, a missing page
or anchor fails it), and its reference pages are generated from their sources: every route of
the OpenAPI document, every ``emq`` command and every declared setting appear, and the
benchmark table carries every figure of ``docs/data/bench.json``."""

from __future__ import annotations

import dataclasses
import html
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from emq.api.openapi import spec
from emq.bench.suite import rows_of
from emq.cli.config import sections
from emq.core.settings import EXTRA_ENV, env_name, prefix_of
from tests.docs.conftest import BIN, ROOT

BUILD_TIMEOUT_S = 180  # a few seconds alone; more on a machine that other tests keep busy
pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S + 30)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = os.environ | {"PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return out


def text_of(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))


def test_the_http_reference_has_every_route_and_schema(site: Path) -> None:
    page = text_of(site / "reference/http-api/index.html")
    doc = spec()
    for path, methods in doc["paths"].items():
        for method in methods:
            assert f"{method.upper()} {path}" in page
    for name in doc["components"]["schemas"]:
        assert f'id="schema-{name.lower()}"' in (site / "reference/http-api/index.html").read_text()


def test_the_cli_reference_has_every_command(site: Path) -> None:
    page = text_of(site / "reference/cli/index.html")
    for command in ("emq stack", "emq topic set-quota", "emq job show", "emq plan apply"):
        assert f"usage: {command}" in page
    assert "--standalone" in page


def test_the_configuration_reference_has_every_setting(site: Path) -> None:
    page = text_of(site / "reference/configuration/index.html")
    for cls in sections().values():
        for f in dataclasses.fields(cls):
            assert env_name(f.name, prefix_of(cls)) in page
    for var in EXTRA_ENV:
        assert var in page


def test_the_benchmark_table_has_every_figure_of_the_data(site: Path) -> None:
    page = text_of(site / "benchmarks/index.html")
    doc = json.loads((ROOT / "docs/data/bench.json").read_text())
    assert doc["date"] in page and doc["machine"]["cpu"] in page
    for part, label, value, _, _ in rows_of(doc):
        assert f"{part}{label}{value}" in page.replace("\n", "")


def test_the_readme_links_to_pages_and_anchors_that_exist(site: Path) -> None:
    """The README is not part of the site, so MkDocs does not check its links: every relative
    link must name a file of the repository and, for a page of the site, an anchor it has."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(((?!https?:)[^)#]+)(?:#([^)]+))?\)", readme)
    assert len(links) > 20
    for target, anchor in links:
        assert (ROOT / target).exists(), target
        if anchor:
            page = Path(target).relative_to("docs").with_suffix("")
            built = (site / page / "index.html").read_text(encoding="utf-8")
            assert f'id="{anchor}"' in built, f"{target}#{anchor}"
