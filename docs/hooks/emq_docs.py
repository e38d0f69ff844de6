"""MkDocs hook: the reference pages and the benchmark table, generated at build time.

A page asks for generated Markdown with a marker on a line of its own,
``<!-- emq:generate NAME -->``, and the hook replaces it before MkDocs renders the page:

* ``http-api``: every route of the server's own OpenAPI document (:func:`emq.api.openapi.spec`)
  and every schema it refers to;
* ``cli``: every ``emq`` command's ``--help``, walked from the parser the CLI itself builds
  (:func:`emq.cli.main.build_parser`);
* ``settings``: every setting of every section (:func:`emq.cli.config.sections`, declared in
  ``emq/core/settings.py`` and each section's ``settings.py``) with its variable, type, default
  and range, beside its meaning from ``docs/data/settings.yml``;
* ``bench``: the figures of ``docs/data/bench.json`` (what ``emq bench all --json --out FILE``
  writes), each beside its target and the command that reproduces it;
* ``plan-accuracy``: the figures of ``docs/data/plan-accuracy.json`` (what ``emq bench
  plan-accuracy --json --out FILE`` writes).

So none of these is written by hand, and none can drift from the code: a setting declared
without a meaning in ``settings.yml``, or a meaning of a setting that no longer exists, fails
the build. Unknown markers fail it too.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import inspect
import json
import os
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

MARKER = re.compile(r"^<!-- emq:generate ([a-z-]+) -->$", re.M)
DOCS = Path(__file__).resolve().parent.parent
HELP_COLUMNS = "100"  # argparse wraps --help to $COLUMNS: the same text on every machine


class GenerationError(Exception):
    """A generated page cannot be built from its source (the build stops)."""


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs event: replace each marker of the page by its generated Markdown."""

    def generate(m: re.Match[str]) -> str:
        name = m[1]
        if name not in GENERATORS:
            raise GenerationError(f"{page.file.src_path}: unknown generated section {name!r}")
        return GENERATORS[name]()

    return MARKER.sub(generate, markdown)


# ----------------------------------------------------------------------------- cells


def _cell(text: Any) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text: Any) -> str:
    return f"`{text}`" if str(text) else ""


# ----------------------------------------------------------------------------- HTTP API


def http_api() -> str:
    from emq.api.openapi import spec

    doc = spec()
    out = [f"Generated from `GET /openapi.json` of EMQ API {doc['info']['version']}.", ""]
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            out += _operation(method.upper(), path, op)
    out += ["## Schemas", ""]
    for name, schema in doc["components"]["schemas"].items():
        out += _schema_section(name, schema)
    return "\n".join(out)


def _anchor(name: str) -> str:
    return f"schema-{name.lower()}"


def _type(s: dict[str, Any]) -> str:
    """A JSON schema's type in a few words, with links to named schemas."""
    if "$ref" in s:
        name = s["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{_anchor(name)})"
    if "anyOf" in s or "oneOf" in s:
        return " or ".join(_type(x) for x in s.get("anyOf", s.get("oneOf")))
    if "enum" in s:
        return ", ".join(f"`{json.dumps(v)}`" for v in s["enum"])
    kind = s.get("type", "any")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array":
        return f"array of {_type(s.get('items', {}))}"
    if kind == "object" and "additionalProperties" in s and s["additionalProperties"]:
        extra = s["additionalProperties"]
        return f"object of {_type(extra) if isinstance(extra, dict) else 'any'}"
    return str(kind)


def _limits(s: dict[str, Any]) -> str:
    words = []
    for key, text in (
        ("minimum", ">= {}"),
        ("exclusiveMinimum", "> {}"),
        ("maximum", "<= {}"),
        ("minLength", "length >= {}"),
        ("maxLength", "length <= {}"),
        ("maxItems", "at most {} items"),
        ("maxProperties", "at most {} entries"),
    ):
        if key in s:
            words.append(text.format(s[key]))
    for sub in s.get("anyOf", ()):
        extra = _limits(sub)
        if extra:
            words.append(extra)
    return ", ".join(words)


def _operation(method: str, path: str, op: dict[str, Any]) -> list[str]:
    out = [f"## {method} `{path}`", "", op.get("summary", ""), ""]
    if op.get("description"):
        out += [op["description"], ""]
    out.append("Authentication: " + ("bearer token." if op.get("security") else "none."))
    out.append("")
    params = op.get("parameters", [])
    if params:
        out += ["| parameter | in | type | required | meaning |", "|---|---|---|---|---|"]
        for p in params:
            schema = p.get("schema", {})
            meaning = p.get("description") or schema.get("description", "")
            out.append(
                f"| `{p['name']}` | {p['in']} | {_cell(_type(schema))} | "
                f"{'yes' if p.get('required') else 'no'} | {_cell(meaning)} |"
            )
        out.append("")
    body = op.get("requestBody")
    if body:
        for media, content in body.get("content", {}).items():
            out += [f"Request body (`{media}`): {_type(content.get('schema', {}))}", ""]
    out += ["| status | meaning | body |", "|---|---|---|"]
    for status, resp in op.get("responses", {}).items():
        content = resp.get("content", {})
        shape = ", ".join(f"{_type(c.get('schema', {}))}" for c in content.values())
        out.append(f"| {status} | {_cell(resp.get('description', ''))} | {_cell(shape)} |")
    return [*out, ""]


def _schema_section(name: str, s: dict[str, Any]) -> list[str]:
    out = [f"### {name} {{#{_anchor(name)}}}", ""]
    if s.get("description"):
        out += [s["description"], ""]
    props = s.get("properties")
    if not props:
        return [*out, f"Type: {_type(s)}.", ""]
    required = set(s.get("required", ()))
    out += ["| field | type | required | default | meaning |", "|---|---|---|---|---|"]
    for field, p in props.items():
        default = json.dumps(p["default"]) if "default" in p else ""
        meaning = "; ".join(x for x in (p.get("description", ""), _limits(p)) if x)
        out.append(
            f"| `{field}` | {_cell(_type(p))} | {'yes' if field in required else 'no'} | "
            f"{_cell(_code(default))} | {_cell(meaning)} |"
        )
    if s.get("additionalProperties") is False:
        out += ["", "Other fields are refused (422)."]
    return [*out, ""]


# ----------------------------------------------------------------------------- CLI


def cli() -> str:
    from emq.cli.main import build_parser

    os.environ["COLUMNS"] = HELP_COLUMNS
    parser = build_parser()
    commands = list(_commands(parser))
    out = ["| command | what it does |", "|---|---|"]
    for prog, help_text, _ in commands:
        out.append(f"| [`{prog}`](#{_slug(prog)}) | {_cell(help_text)} |")
    out.append("")
    for prog, _, sub in commands:
        out += [f"## `{prog}` {{#{_slug(prog)}}}", "", "```text", sub.format_help().rstrip(), "```"]
        out.append("")
    return "\n".join(out)


def _slug(prog: str) -> str:
    return prog.replace(" ", "-")


def _commands(
    parser: argparse.ArgumentParser, help_text: str = ""
) -> typing.Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """Every parser of the tree, depth first: (its prog, its one-line help, the parser)."""
    yield parser.prog, help_text or (parser.description or ""), parser
    # argparse has no public way to walk its subcommands: its own help formatter reads these.
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield from _commands(sub, helps.get(name, ""))


# ----------------------------------------------------------------------------- settings


def settings() -> str:
    from emq.cli.config import sections
    from emq.core.settings import EXTRA_ENV, env_name, is_secret, prefix_of, shown_value

    meanings = settings_meanings()
    declared: list[str] = []
    out: list[str] = []
    for section, cls in sections().items():
        table = "top level" if section == "core" else f"`[{section}]` table"
        out += [f"## {section}", "", f"`{cls.__module__}.{cls.__name__}`; in TOML: the {table}."]
        out += ["", "| variable | type | default | range | meaning |", "|---|---|---|---|---|"]
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            var = env_name(f.name, prefix_of(cls))
            declared.append(var)
            default = _default(f, shown_value)
            meaning = meanings.get(var, "")
            if is_secret(f):
                meaning += " (a secret: shown as `***`)"
            out.append(
                f"| `{var}` | {_cell(_type_name(hints[f.name]))} | {_cell(default)} | "
                f"{_cell(_rule(f))} | {_cell(meaning)} |"
            )
        out.append("")
    out += ["## files", "", "Read before any settings exist.", ""]
    out += ["| variable | default | meaning |", "|---|---|---|"]
    for var, default in EXTRA_ENV.items():
        declared.append(var)
        out.append(
            f"| `{var}` | {_cell(_code(default)) or '(empty)'} | {_cell(meanings.get(var))} |"
        )
    missing = sorted(set(declared) - set(meanings))
    unknown = sorted(set(meanings) - set(declared))
    if missing or unknown:
        raise GenerationError(
            f"docs/data/settings.yml: no meaning for {missing}; meanings of no setting: {unknown}"
        )
    return "\n".join(out)


def settings_meanings() -> dict[str, str]:
    """Each setting's meaning, by variable, from ``docs/data/settings.yml``."""
    data = yaml.safe_load((DOCS / "data" / "settings.yml").read_text(encoding="utf-8"))
    return {str(k): " ".join(str(v).split()) for k, v in data.items()}


def _default(f: dataclasses.Field[Any], shown_value: Any) -> str:
    if f.default is dataclasses.MISSING:
        return ""
    value = shown_value(f.default)
    if value in ("", []):
        return "(empty)"
    if isinstance(value, list):
        value = ",".join(map(str, value))
    if isinstance(value, bool):
        value = str(value).lower()
    return f"`{value}`"


def _type_name(tp: Any) -> str:
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return ", ".join(f"`{m.value}`" for m in tp)
    if typing.get_origin(tp) is tuple:
        return "comma-separated CIDRs"
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        return "CIDR"
    return {bool: "true/false", int: "integer", float: "number", str: "text"}.get(tp, str(tp))


def _rule(f: dataclasses.Field[Any]) -> str:
    """The range a numeric or patterned setting's check enforces, read from the check itself
    (:func:`emq.core.settings.at_least` and its siblings close over their bounds)."""
    check = f.metadata.get("check")
    if check is None or not hasattr(check, "__closure__") or not check.__closure__:
        return ""
    bound = inspect.getclosurevars(check).nonlocals
    kind = check.__qualname__.split(".")[0]
    if kind == "at_least":
        return f"at least {bound['low']:g}"
    if kind == "greater_than":
        return f"greater than {bound['low']:g}"
    if kind == "between":
        return f"from {bound['low']:g} to {bound['high']:g}"
    if kind == "matching":
        return str(bound["what"])
    return ""


# ----------------------------------------------------------------------------- benchmarks


BENCH_FILE = DOCS / "data" / "bench.json"


def bench() -> str:
    from emq.bench.suite import rows_of

    doc = json.loads(BENCH_FILE.read_text(encoding="utf-8"))
    m = doc["machine"]
    shown = {k: v for k, v in m.items() if v != "" and k != "date"}
    machine = ", ".join(f"{k.replace('_', ' ')} {_cell(v)}" for k, v in shown.items())
    out = [
        f"Run of {doc['date']}, {doc['seconds']:g} s in all; the machine: {machine}.",
        "",
        *_contention(doc),
        "| benchmark | figure | measured | target | met | reproduce |",
        "|---|---|---|---|---|---|",
    ]
    for part, label, value, target, met in rows_of(doc):
        verdict = "" if met is None else ("yes" if met else "**no**")
        out.append(
            f"| {part} | {_cell(label)} | {_cell(value)} | {_cell(target)} | {verdict} | "
            f"`{_reproduce(part, doc)}` |"
        )
    return "\n".join(out)


def _contention(doc: dict[str, Any]) -> list[str]:
    """What else took the machine's CPU during the dispatch workloads, as their results say."""
    seen = [
        w["contention"]
        for w in doc["results"].get("dispatch", {}).get("results", ())
        if w.get("contention")
    ]
    if not seen:
        return []

    def span(key: str) -> str:
        values = [c[key] for c in seen if key in c]
        return f"{min(values):g}-{max(values):g}" if values else "?"

    loads = [x for c in seen for x in c.get("loadavg_1m", ())]
    return [
        "While the worker workloads ran, other processes took "
        f"{span('other_processes_pct_of_core')} % of a core and the host stole "
        f"{span('stolen_pct_of_core')} % (load average "
        f"{min(loads):g}-{max(loads):g}): figures measured beside other work are low.",
        "",
    ]


def _reproduce(part: str, doc: dict[str, Any]) -> str:
    if part.startswith("dispatch "):
        workload, _, noop = part.split()[1].partition("-")
        return f"emq bench dispatch --workload {workload}{' --noop' if noop else ''} --json"
    if part == "fleet":
        f = doc["results"]["fleet"]
        return f"emq fleet simulate --groups {f['groups']} --workers {f['workers']} --json"
    if part == "plan":
        return f"emq bench plan --rows {doc['results']['plan']['rows']} --json"
    return f"emq bench {part} --json"


PLAN_ACCURACY_FILE = DOCS / "data" / "plan-accuracy.json"


def plan_accuracy() -> str:
    """The figures of ``docs/data/plan-accuracy.json`` (``emq bench plan-accuracy --json --out
    FILE``): the bench's own table, with its machine and date."""
    from emq.bench.plan_accuracy import summary

    doc = json.loads(PLAN_ACCURACY_FILE.read_text(encoding="utf-8"))
    m = doc["machine"]
    shown = {k: v for k, v in m.items() if v != "" and k != "date"}
    machine = ", ".join(f"{k.replace('_', ' ')} {_cell(v)}" for k, v in shown.items())
    return f"Run of {doc['date']}; the machine: {machine}.\n\n" + summary(doc)


GENERATORS = {
    "http-api": http_api,
    "cli": cli,
    "settings": settings,
    "bench": bench,
    "plan-accuracy": plan_accuracy,
}
