"""Imports point inward (STYLE.md, "Layering"): checked statically and in fresh interpreters.

The static check reads every module's import statements and holds them to the table below; the
dynamic check imports each module alone in a fresh forked child with none of its own layer's
modules loaded (``-W error``: no circular import, no import-time warning) and checks that nothing
forbidden got loaded transitively.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("emq", "capacity", "adapters", "allocator", "worker", "spark")
# The core of ``emq`` is the package ``emq.core`` (and the package root, which holds only the
# version): the model, the seams, naming, settings, errors, the thread-to-loop bridge and the
# sendability checks (yarl, to parse a URL exactly as aiohttp will send it) and the API's request
# schema (pydantic: the one definition the API, the CLI's local check and /openapi.json share;
# ``emq.core.model`` imports it lazily, when something is parsed). Everything else in
# ``emq`` is an application (API, CLI, client, demo, local stack, benchmarks) or the composition
# root, which may import anything. The layer is read from the import path itself.
HTTP_AND_STORES = frozenset({"aiohttp", "redis", "kazoo", "uhashring", "pyspark"})


@dataclass(frozen=True)
class Rule:
    ours: frozenset[str]  # our packages it may import ("emq.core" = the emq core only)
    third_party: frozenset[str]  # third-party top-level modules it may import directly
    forbidden_loaded: frozenset[str]  # third-party packages that must not even load transitively
    # Single modules of another layer it may import (and so load their parent packages). The
    # one use: the kazoo seam ``adapters.zk`` (client construction, auth/ACLs, start/stop,
    # session states, kazoo results on the loop), shared by the config store and the fleet.
    # The two may not import each other and the core may not import kazoo, so the seam lives
    # with the adapters and ``allocator`` (and ``worker``, which loads it through
    # ``allocator``) may use that module and no other of ``adapters``.
    seams: frozenset[str] = frozenset()

    def allows(self, layer: str, name: str) -> bool:
        """May a module of ``layer`` import (or load) our module ``name``?"""
        if layer_of(name) in self.ours | {layer}:
            return True
        return any(name == m or m.startswith(name + ".") for m in self.seams)


RULES = {
    "emq.core": Rule(
        frozenset({"emq.core"}),
        frozenset({"yarl", "pydantic", "pydantic_core", "cronsim"}),
        HTTP_AND_STORES,
    ),
    "emq.root": Rule(
        frozenset(PACKAGES) | {"emq.core"},
        frozenset(
            {
                "aiohttp",
                "redis",
                "kazoo",
                "uvloop",
                "yarl",
                "multidict",
                "orjson",
                "prometheus_client",
                "rich",
                "pydantic",
                "typing_extensions",
            }
        ),
        frozenset(),
    ),
    "capacity": Rule(frozenset({"emq.core"}), frozenset(), HTTP_AND_STORES),
    "adapters": Rule(
        frozenset({"emq.core"}),
        frozenset({"redis", "hiredis", "kazoo"}),
        frozenset({"aiohttp", "uhashring", "pyspark"}),
    ),
    "allocator": Rule(
        frozenset({"emq.core"}),
        frozenset({"kazoo", "uhashring"}),
        frozenset({"aiohttp", "redis", "pyspark"}),
        seams=frozenset({"adapters.zk"}),
    ),
    "worker": Rule(
        frozenset({"emq.core", "capacity", "allocator"}),
        frozenset(
            {
                "aiohttp",
                "uvloop",
                "yarl",
                "multidict",
                "orjson",
                "prometheus_client",
                "standardwebhooks",
                "httptools",
            }
        ),
        frozenset({"redis", "pyspark"}),
        seams=frozenset({"adapters.zk"}),
    ),
    "spark": Rule(
        frozenset({"emq.core", "capacity"}),
        frozenset({"pyspark", "matplotlib", "numpy", "pandas", "pyarrow"}),
        frozenset({"aiohttp", "redis", "kazoo"}),
    ),
}


def layer_of(module: str) -> str:
    top = module.split(".")[0]
    if top == "emq":
        return (
            "emq.core"
            if module in ("emq", "emq.core") or module.startswith("emq.core.")
            else "emq.root"
        )
    return top


def all_modules() -> list[tuple[str, Path]]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if parts[-1] != "__main__":
                found.append((".".join(parts), path))
    return found


def imported_names(module: str, path: Path) -> set[str]:
    """Absolute names of everything ``path`` imports (relative imports resolved)."""
    names: set[str] = set()
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            names.add(stem)
            # "from emq.core import model" imports the module emq.core.model; "from
            # emq.core.model import Job" imports only emq.core.model.
            names.update(
                f"{stem}.{a.name}" for a in node.names if _is_our_module(f"{stem}.{a.name}")
            )
    return names


def violations(module: str, names: set[str]) -> list[str]:
    layer = layer_of(module)
    rule = RULES[layer]
    bad = []
    for name in sorted(names):
        top = name.split(".")[0]
        stdlib = top in sys.stdlib_module_names or top == "__future__"
        if top in PACKAGES and not rule.allows(layer, name):
            bad.append(f"{module} imports {name} ({layer_of(name)})")
        elif top not in PACKAGES and not stdlib and top not in rule.third_party:
            bad.append(f"{module} imports third-party {top}")
    return bad


def _is_our_module(name: str) -> bool:
    """True if ``name`` is one of our modules (not a class or function imported from one)."""
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_the_rules_cover_every_package() -> None:
    modules = all_modules()
    assert {layer_of(m) for m, _ in modules} <= set(RULES)
    assert {"emq.core.model", "emq.cli.main", "capacity.split"} <= {m for m, _ in modules}


def test_static_imports_point_inward() -> None:
    problems = [
        v
        for module, path in all_modules()
        for v in violations(module, imported_names(module, path))
    ]
    assert problems == []


def test_the_checker_catches_outward_imports() -> None:
    # The checker itself must fail on the imports the layering forbids.
    assert violations("allocator.fleet", {"aiohttp"}) == [
        "allocator.fleet imports third-party aiohttp"
    ]
    assert violations("emq.core.model", {"worker", "worker.dispatch"})
    assert violations("emq.core.model", {"emq.cli.main"})
    assert violations("worker.fetch", {"adapters.redis_queue"})
    # The kazoo seam is the one module of adapters the fleet may use; the rest stays out.
    assert violations("allocator.fleet", {"adapters", "adapters.zk"}) == []
    assert violations("allocator.fleet", {"adapters.zk_config"})
    assert violations("adapters.zk", {"allocator", "allocator.fleet"})
    assert violations("capacity.split", {"emq.core.model", "emq.core.errors"}) == []


# Each module is imported alone in a fresh child of a fork server: one interpreter per layer (``-W
# error``) first imports the third-party modules the layer's own modules import directly (except
# those the layer must not load) and the modules of the inner layers it may use (``Rule.ours`` and
# its seams: they cannot import this layer back, the static check holds them to that, and their own
# layer's server probes each of them with nothing of ours loaded), then forks one child per module
# of the layer, which imports that module and reports ``sys.modules``. No module of the layer is
# loaded before the fork, so a circular import within it shows exactly as in a fresh interpreter;
# the server checks that its preload loaded nothing forbidden, so every forbidden module a child
# reports was loaded by the module under test. (One interpreter per module cost ~0.3 s of CPU each,
# mostly re-importing aiohttp, pydantic, pyspark, pandas; re-importing the inner layers in every
# child, ~0.1 s each.)
_FORK_SERVER = r"""
import gc, json, os, sys, threading, traceback
preload, forbidden, inner, modules = json.loads(sys.argv[1])
for name in preload + inner:
    __import__(name)
inner = set(inner)
early = sorted(m for m in sys.modules if m.split(".")[0] in forbidden and m not in inner)
assert not early, f"the preload loads {early}"
assert threading.active_count() == 1, "the preload started a thread: no fork"
gc.freeze()  # the children's collections then skip (and do not copy) the preloaded heap
results = {}
for module in modules:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            __import__(module)
            result = {"loaded": sorted(sys.modules)}
        except BaseException as exc:
            result = {"error": traceback.format_exception_only(exc)[-1].strip()}
        with os.fdopen(w, "w") as out:
            json.dump(result, out)
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as inp:
        text = inp.read()
    _, status = os.waitpid(pid, 0)
    results[module] = json.loads(text) if text else {"error": f"child died: status {status}"}
print(json.dumps(results))
"""


def _preload(modules: list[tuple[str, Path]], forbidden: frozenset[str]) -> list[str]:
    """The third-party modules ``modules`` import directly, less those ``forbidden`` to load.

    A layer's server preloads what its own modules import (at module level or inside a
    function), not what the other layers' do: a child then loads no third-party module its
    module imports directly, and the server stays small, so each fork copies less. (The inner
    layers' modules the server imports load their own third-party modules.)"""
    names = {
        name
        for module, path in modules
        for name in imported_names(module, path)
        if name.split(".")[0] not in set(PACKAGES) | sys.stdlib_module_names | {"__future__"}
    }
    return sorted(n for n in names if n.split(".")[0] not in forbidden)


def _probe_alone() -> dict[str, dict[str, list[str] | str]]:
    """``{module: {"loaded": sys.modules after importing it alone} or {"error": ...}}``."""
    layers: dict[str, list[str]] = {}
    paths: dict[str, list[tuple[str, Path]]] = {}
    for module, path in all_modules():
        layers.setdefault(layer_of(module), []).append(module)
        paths.setdefault(layer_of(module), []).append((module, path))
    forbidden_anywhere = frozenset(PACKAGES)  # of ours, only the inner layers are preloaded
    procs = []
    for layer, modules in layers.items():
        rule = RULES[layer]
        inner = [m for other in rule.ours - {layer} for m in layers.get(other, [])]
        inner = sorted({*inner, *rule.seams, *(s.rpartition(".")[0] for s in rule.seams)})
        argv = [
            _preload(paths[layer], rule.forbidden_loaded),
            sorted(rule.forbidden_loaded | forbidden_anywhere),
        ]
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-W",
                    "error",
                    "-c",
                    _FORK_SERVER,
                    json.dumps([*argv, inner, modules]),
                ],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results: dict[str, dict[str, list[str] | str]] = {}
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"the import probe failed: {err.strip()}"
        results.update(json.loads(out))
    return results


def test_each_module_imports_alone_and_loads_nothing_forbidden() -> None:
    problems = []
    for module, result in _probe_alone().items():
        if "error" in result:
            problems.append(f"{module} fails to import alone: {[result['error']]}")
            continue
        layer = layer_of(module)
        rule = RULES[layer]
        for loaded in result["loaded"]:
            top = loaded.split(".")[0]
            ours_outward = top in PACKAGES and not rule.allows(layer, loaded)
            if top in rule.forbidden_loaded or ours_outward:
                problems.append(f"importing {module} loads {loaded}")
    assert problems == []


@pytest.mark.parametrize(
    ("module", "name"), [("allocator", "aiohttp"), ("emq.core.model", "worker")]
)
def test_an_injected_outward_import_is_caught(module: str, name: str) -> None:
    assert violations(module, {name}), f"{module} importing {name} should be a violation"
