"""No private attributes of third-party libraries in our code (issue 13, item 3).

A library's private attribute (``_name``) can change or vanish in any release without notice;
code that reads, writes or overrides one breaks silently (a guard that no longer fires). The
check reads the sources of ``emq/``, ``adapters/``, ``allocator/`` and ``worker/`` and flags:

* in a class derived from a library's class: ``self._x``, ``cls._x``, ``super()._x`` or a
  definition of ``_x`` where ``_x`` is one of the names that class's library ancestors use
  (read from their source: ``self._x``/``cls._x``, ``__slots__``, methods and class attributes);
* ``module._x`` where ``module`` is a library's module (``web._run_app``);
* ``obj._x`` on any other object, in a file that imports a library whose classes use ``_x``
  (``ring._keys`` of uhashring, ``wh._whsecret`` of standardwebhooks, aiohttp's ``_loop``).

Our own private attributes are never flagged for being private: only the names the libraries
themselves use are looked for, and ``self._x`` in our own classes (not derived from a library's)
is ours. The standard library is out of scope (``namedtuple._replace`` is its public API).
``capacity/`` has none; ``spark/`` is not scanned: reaching the JVM (Hadoop's file system for a
marker on HDFS/S3, the driver's pid) goes through PySpark's py4j gateway,
``sparkContext._jvm``/``_jsc``, which has no public equivalent (this check finds those three).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("emq", "adapters", "allocator", "worker")
OURS = frozenset({"emq", "adapters", "allocator", "worker", "capacity", "spark", "tests"})
SELF_NAMES = frozenset({"self", "cls"})


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def is_library(module: str) -> bool:
    top = module.partition(".")[0]
    return top not in OURS and top not in sys.stdlib_module_names and top != "__future__"


# ------------------------------------------------------------------ what a library calls private


def _privates_of_tree(tree: ast.AST) -> set[str]:
    """Private names a library's code uses on its own objects: ``self._x``/``cls._x``, names
    in ``__slots__``, and methods and class attributes named ``_x``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            if isinstance(node.value, ast.Name) and node.value.id in SELF_NAMES:
                names.add(node.attr)
        elif isinstance(node, ast.ClassDef):
            names |= _class_level_privates(node)
    return names


def _class_level_privates(node: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            targets = [item.name]
        elif isinstance(item, ast.Assign):
            targets = [t.id for t in item.targets if isinstance(t, ast.Name)]
            if "__slots__" in targets:
                names |= {
                    c.value
                    for c in ast.walk(item.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                }
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            targets = [item.target.id]
        else:
            continue
        names |= {t for t in targets if is_private(t)}
    return {n for n in names if is_private(n)}


# The same names read from a library's source text (much faster than parsing every module of
# redis, pydantic, rich...): ``self._x``/``cls._x``, methods and class-level names of top-level
# classes, and names in ``__slots__``.
_ON_SELF = re.compile(rb"\b(?:self|cls)\.(_[A-Za-z0-9]\w*)")
_IN_CLASS = re.compile(rb"^    (?:async def |def |class )?(_[A-Za-z0-9]\w*)\s*[:=(]", re.MULTILINE)
_SLOTS = re.compile(rb"__slots__\s*=\s*[(\[{]([^)\]}]*)")
_QUOTED = re.compile(rb"[\"'](_[A-Za-z0-9]\w*)[\"']")


@cache
def library_privates(top: str) -> frozenset[str]:
    """Every private name the Python sources of library ``top`` use (none for a compiled one)."""
    spec = importlib.util.find_spec(top)
    if spec is None:
        return frozenset()
    if spec.submodule_search_locations:
        files = [f for d in spec.submodule_search_locations for f in Path(d).rglob("*.py")]
    elif spec.origin and spec.origin.endswith(".py"):
        files = [Path(spec.origin)]
    else:
        files = []
    names: set[bytes] = set()
    for f in files:
        text = f.read_bytes()
        names.update(_ON_SELF.findall(text), _IN_CLASS.findall(text))
        for slots in _SLOTS.findall(text):
            names.update(_QUOTED.findall(slots))
    return frozenset(n.decode() for n in names if not n.startswith(b"__"))


@cache
def class_privates(cls: type) -> frozenset[str]:
    """The private names used by ``cls``'s ancestors that belong to a library."""
    names: set[str] = set()
    for base in cls.__mro__:
        if not is_library(base.__module__):
            continue
        names |= {n for n in vars(base) if is_private(n)}
        tree = _class_tree(base)
        if tree is None:
            try:
                tree = ast.parse(textwrap.dedent(inspect.getsource(base)))
            except (OSError, TypeError):  # compiled: its attributes are all in vars() above
                continue
        names |= _privates_of_tree(tree)
    return frozenset(names)


@cache
def _module_tree(path: str) -> ast.Module | None:
    try:
        return ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def _class_tree(cls: type) -> ast.ClassDef | None:
    """``cls``'s definition in its module's tree, the module parsed once for all its classes
    (``inspect.getsource`` parses the whole module again for each class it is asked for)."""
    try:
        path = inspect.getsourcefile(cls)
    except TypeError:
        return None
    node: ast.AST | None = _module_tree(path) if path else None
    for part in cls.__qualname__.split("."):
        if node is None or part == "<locals>":
            return None
        node = next(
            (n for n in ast.walk(node) if isinstance(n, ast.ClassDef) and n.name == part), None
        )
    return node if isinstance(node, ast.ClassDef) else None


# ------------------------------------------------------------------ our code


@dataclass(frozen=True)
class Finding:
    where: str
    line: int
    code: str
    library: str

    def __str__(self) -> str:
        return f"{self.where}:{self.line}: {self.code} (private to {self.library})"


def _imports(nodes: list[ast.AST]) -> dict[str, str]:
    """Local name -> the dotted path it was imported as (function-level imports included)."""
    table: dict[str, str] = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    table[a.asname] = a.name
                else:
                    top = a.name.partition(".")[0]
                    table[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                table[a.asname or a.name] = f"{node.module}.{a.name}"
    return table


def _dotted(node: ast.expr, imports: dict[str, str]) -> str | None:
    """``web.Server`` -> ``aiohttp.web.Server`` through the file's imports; None if unknown."""
    if isinstance(node, ast.Name):
        return imports.get(node.id)
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value, imports)
        return None if head is None else f"{head}.{node.attr}"
    return None


@cache
def _resolve(path: str) -> object | None:
    """The module or object at a dotted path (None if it cannot be imported)."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


Scope = tuple[ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, bool]  # (function, cls is ours)


class Checker:
    def __init__(self, source: str, where: str) -> None:
        self.tree = ast.parse(source)
        self.where = where
        nodes = list(ast.walk(self.tree))
        self.imports = _imports(nodes)
        libraries = {p.partition(".")[0] for p in self.imports.values() if is_library(p)}
        self.by_name: dict[str, list[str]] = {}  # a library private name -> libraries using it
        for lib in sorted(libraries):
            for name in library_privates(lib):
                self.by_name.setdefault(name, []).append(lib)
        self.classes = [n for n in nodes if isinstance(n, ast.ClassDef)]
        # Classes of this file that are wholly ours (no library ancestor)
        self.our_classes = {c.name for c in self.classes if not self._library_bases(c)}
        self._locals: dict[int, set[str]] = {}

    def findings(self) -> Iterator[Finding]:
        for node in self.classes:
            yield from self._in_subclass(node)
        yield from self._visit(self.tree, (), False)

    def _visit(
        self, node: ast.AST, scopes: tuple[Scope, ...], in_library_class: bool
    ) -> Iterator[Finding]:
        """Every ``obj._x`` below ``node`` on something other than ``self`` (see
        :meth:`_in_subclass` for that); ``scopes``: the functions it is in."""
        if isinstance(node, ast.ClassDef):
            in_library_class = bool(self._library_bases(node))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            scopes = (*scopes, (node, not in_library_class))
        elif (
            isinstance(node, ast.Attribute)
            and is_private(node.attr)
            and not (isinstance(node.value, ast.Name) and self._is_ours(node.value.id, scopes))
        ):
            yield from self._on_object(node)
        for child in ast.iter_child_nodes(node):
            yield from self._visit(child, scopes, in_library_class)

    def _is_ours(self, name: str, scopes: tuple[Scope, ...]) -> bool:
        """Is local ``name`` known to hold one of our objects, in one of these functions?
        (``cls(...)`` is ours unless its class derives from a library's.)"""
        for func, cls_is_ours in scopes:
            if id(func) not in self._locals:
                self._locals[id(func)] = self._our_locals(func, cls_is_ours)
            if name in self._locals[id(func)]:
                return True
        return False

    def _library_bases(self, node: ast.ClassDef) -> list[type]:
        return [cls for b in node.bases if isinstance(cls := self._library_class(b), type)]

    def _library_class(self, base: ast.expr) -> object | None:
        path = _dotted(base, self.imports)
        return _resolve(path) if path is not None and is_library(path) else None

    def _in_subclass(self, node: ast.ClassDef) -> Iterator[Finding]:
        bases = self._library_bases(node)
        if not bases:
            return
        used: dict[str, str] = {}
        for cls in bases:
            for name in class_privates(cls):
                used.setdefault(name, f"{cls.__module__}.{cls.__qualname__}")
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name in used:
                yield Finding(self.where, item.lineno, f"def {item.name}", used[item.name])
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and _is_self(sub.value) and sub.attr in used:
                code = f"{ast.unparse(sub.value)}.{sub.attr}"
                yield Finding(self.where, sub.lineno, code, used[sub.attr])

    def _on_object(self, node: ast.Attribute) -> Iterator[Finding]:
        code = f"{ast.unparse(node.value)}.{node.attr}"
        path = _dotted(node.value, self.imports)
        if path is not None:  # a name we imported: a library's module or class, or ours
            if is_library(path):
                yield Finding(self.where, node.lineno, code, path)
            return
        if _is_self(node.value):  # our own class's attribute
            return
        libraries = self.by_name.get(node.attr)
        if libraries:
            yield Finding(self.where, node.lineno, code, " or ".join(libraries))

    # -------------------------------------------------------------- which locals are ours

    def _our_locals(
        self, func: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, cls_is_ours: bool
    ) -> set[str]:
        """Names bound in ``func`` to our objects: parameters annotated with our classes,
        variables assigned (or ``with ... as``) from our classes' constructors or ``cls(...)``."""
        names: set[str] = set()
        a = func.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
            if arg.annotation is not None and self._is_our_type(arg.annotation):
                names.add(arg.arg)
        for n in ast.walk(func):
            if isinstance(n, ast.Assign) and self._is_our_construction(n.value, cls_is_ours):
                names |= {t.id for t in n.targets if isinstance(t, ast.Name)}
            elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                if self._is_our_type(n.annotation):
                    names.add(n.target.id)
            elif (
                isinstance(n, ast.withitem)
                and isinstance(n.optional_vars, ast.Name)
                and self._is_our_construction(n.context_expr, cls_is_ours)
            ):
                names.add(n.optional_vars.id)
        return names

    def _is_our_construction(self, node: ast.expr, cls_is_ours: bool) -> bool:
        if isinstance(node, ast.Await):
            node = node.value
        if not isinstance(node, ast.Call):
            return False
        func = node.func
        if isinstance(func, ast.Name) and func.id == "cls":
            return cls_is_ours
        return self._is_our_type(func)

    def _is_our_type(self, node: ast.expr) -> bool:
        """Names a class of ours (or of the standard library): never a library's."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                return False
        if isinstance(node, ast.BinOp):  # Ours | None
            return self._is_our_type(node.left) or self._is_our_type(node.right)
        if isinstance(node, ast.Name) and node.id in self.our_classes:
            return True
        path = _dotted(node, self.imports)
        return path is not None and not is_library(path)


def _is_self(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in SELF_NAMES
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
    )


def check(source: str, where: str = "<snippet>") -> list[Finding]:
    return sorted(set(Checker(source, where).findings()), key=lambda f: (f.line, f.code))


# ------------------------------------------------------------------ the tests


def our_files() -> list[Path]:
    return sorted(f for pkg in SCANNED for f in (ROOT / pkg).rglob("*.py"))


def test_no_private_attribute_of_a_library_is_used() -> None:
    findings = [
        str(f) for path in our_files() for f in check(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert not findings, "private attributes of libraries:\n" + "\n".join(findings)


# What the check must catch: the uses issue 13 found, as they were written.
CAUGHT = {
    "aiohttp subclasses (the old emq.api.guard)": (
        """
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

class Handler(RequestHandler):
    def data_received(self, data):
        if not self._request_in_progress:
            self._loop.call_later(1, self.force_close)
    async def _handle_request(self, request, *args):
        return await super()._handle_request(request, *args)
    def _refuse(self):
        if not self._force_close:
            self.force_close()

class Server(web.Server):
    def __call__(self):
        return Handler(self, loop=self._loop, **self._kwargs)

class Runner(web.AppRunner):
    @classmethod
    def made(cls):
        runner = cls()
        return runner._kwargs

    async def _make_server(self):
        plain = await super()._make_server()
        return Server(plain.request_handler, loop=plain._loop, **plain._kwargs)
""",
        {
            "self._request_in_progress",
            "self._loop",
            "def _handle_request",
            "super()._handle_request",
            "self._force_close",
            "self._kwargs",
            "def _make_server",
            "super()._make_server",
            "plain._loop",
            "plain._kwargs",
            "runner._kwargs",
        },
    ),
    "uhashring's ring": (
        """
from uhashring import HashRing

def points(nodes):
    ring = HashRing(nodes=nodes)
    return ring._keys, ring.runtime._ring
""",
        {"ring._keys", "ring.runtime._ring"},
    ),
    "standardwebhooks' secret": (
        """
from standardwebhooks import Webhook

def key(secret):
    return Webhook(secret)._whsecret
""",
        {"Webhook(secret)._whsecret"},
    ),
    "prometheus_client's value": (
        """
from prometheus_client import Gauge

def last(gauge: Gauge) -> float:
    return gauge._value.get()
""",
        {"gauge._value"},
    ),
    "a library module's private function": (
        """
from aiohttp import web
import aiohttp.helpers as helpers

web._run_app
helpers._SENTINEL
""",
        {"web._run_app", "helpers._SENTINEL"},
    ),
}


@pytest.mark.parametrize("case", sorted(CAUGHT))
def test_the_check_catches_a_library_private(case: str) -> None:
    source, expected = CAUGHT[case]
    assert {f.code for f in check(source)} == expected


def test_the_check_leaves_our_own_private_attributes_alone() -> None:
    source = """
import argparse
from aiohttp import web
from uhashring import HashRing
from allocator import assign as assign_module

class Keys:  # ours: its _keys and _loop are not uhashring's or aiohttp's
    def __init__(self, loop):
        self._keys = {}
        self._loop = loop

    def copy(self, other: "Keys"):
        return {**other._keys, **self._other_ring()}

    @classmethod
    def made(cls, loop):
        keys = cls(loop)
        keys._loop = loop
        with Keys(loop) as more:
            return keys._keys | more._keys

    def _other_ring(self):
        return {}

class Handler(web.RequestHandler):
    __slots__ = ()
    def handle_error(self, request, status=500, exc=None, message=None):
        return self.log_debug("public")

def clear():
    assign_module._ring.cache_clear()  # our own module
    argparse._SubParsersAction  # the standard library: out of scope
"""
    assert check(source) == []
