"""Reading the settings (the one place that reads the environment) and ``emq config show``.

Every setting is declared once, as a field of one of the classes of :func:`sections`; its variable
is the class's ``ENV_PREFIX`` + the field's name in capitals. The TOML file of ``--config`` (or
``EMQ_CONFIG``) holds the ``core`` settings at its top level and the others in ``[api]``,
``[worker]`` and ``[fleet]`` tables; the environment wins over it. ``emq config show`` prints
every setting with its value and where the value came from, each secret as ``***`` (tokens,
ZooKeeper credentials, the password of a URL).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from emq.core.errors import ConfigError

if TYPE_CHECKING:
    from emq.cli.common import Subparsers
    from emq.core.settings import Settings

CORE = "core"


def sections() -> Mapping[str, type[Any]]:
    """Each section's settings class, by name (``core`` first). Imported on first use: the
    parser, and so ``emq --help``, does without them."""
    from allocator.settings import FleetSettings
    from emq.api.settings import ApiSettings
    from emq.core.settings import Settings
    from emq.scheduler.settings import SchedulerSettings
    from worker.settings import WorkerSettings

    return {
        CORE: Settings,
        "api": ApiSettings,
        "worker": WorkerSettings,
        "fleet": FleetSettings,
        "scheduler": SchedulerSettings,
    }


EXTRA = "files"  # the section `config show` lists EXTRA_ENV under


@dataclasses.dataclass(frozen=True)
class Origins:
    """What the settings were read from, to tell each value's source."""

    env: Mapping[str, str]
    tables: Mapping[str, Mapping[str, Any]]
    path: str | None

    def source(self, section: str) -> str:
        """How a value from this section's TOML table is described."""
        return f"config file {self.path}" + ("" if section == CORE else f" [{section}]")


def load_settings(args: argparse.Namespace) -> Settings:
    """Read every section from the environment and the config file; the core settings.

    The other sections go to ``args.sections`` (by name) and what they were read from to
    ``args.origins``: only this entry point reads the environment.
    """
    from emq.core.settings import load, unknown_env

    env = dict(os.environ)
    unknown = unknown_env(env, sections().values())
    if unknown:
        raise ConfigError(f"unknown setting {unknown[0]} in the environment (a typo?)")
    path = args.config or env.get("EMQ_CONFIG") or None
    origins = Origins(env, _tables(path), path)
    args.sections = {
        name: load(cls, env, origins.tables[name], source=origins.source(name))
        for name, cls in sections().items()
    }
    args.origins = origins
    core: Settings = args.sections[CORE]
    return core


def _tables(path: str | None) -> dict[str, Mapping[str, Any]]:
    """The TOML table of each section (the file's top level, less the others, is ``core``)."""
    from emq.core.settings import read_toml

    top = dict(read_toml(path)) if path else {}
    tables: dict[str, Mapping[str, Any]] = {}
    for name in sections():
        if name == CORE:
            continue
        table = top.pop(name, {})
        if not isinstance(table, dict):
            raise ConfigError(f"config file {path}: {name} must be a table ([{name}])")
        tables[name] = table
    tables[CORE] = top
    return tables


# ----------------------------------------------------------------------------- config show


def rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every setting (section, key, variable, value as shown, source), in declaration order."""
    from emq.core.settings import EXTRA_ENV, env_name, prefix_of, shown, source_of

    origins: Origins = args.origins
    out = []
    for name, cls in sections().items():
        values = args.sections[name]
        table = origins.tables[name]
        for f in dataclasses.fields(cls):
            out.append(
                {
                    "section": name,
                    "key": f.name,
                    "variable": env_name(f.name, prefix_of(cls)),
                    "value": shown(f, getattr(values, f.name)),
                    "source": source_of(cls, f.name, origins.env, table, origins.source(name)),
                }
            )
    for var, default in EXTRA_ENV.items():
        value = origins.env.get(var, default)
        if var == "EMQ_CONFIG" and args.config:
            value, source = args.config, "--config"
        else:
            source = "env" if var in origins.env else "default"
        out.append({"section": EXTRA, "key": "", "variable": var, "value": value, "source": source})
    return out


def cmd_config(args: argparse.Namespace, settings: Settings) -> int:
    listing = rows(args)
    if args.json:
        doc = {r["variable"]: {k: v for k, v in r.items() if k != "variable"} for r in listing}
        print(json.dumps(doc, indent=2))
        return 0
    width = max(len(r["variable"]) for r in listing)
    values = [_text(r["value"]) for r in listing]
    value_width = max(len(v) for v in values)
    section = None
    for r, value in zip(listing, values, strict=True):
        if r["section"] != section:
            print(("\n" if section else "") + f"[{r['section']}]")
            section = r["section"]
        print(f"{r['variable']:<{width}}  {value:<{value_width}}  {r['source']}")
    return 0


def _text(value: Any) -> str:
    """A value as TOML would spell it, less the quotes (``(empty)`` for nothing)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    return str(value) if value != "" else "(empty)"


def add_commands(sub: Subparsers) -> None:
    """Register ``config show`` on ``emq``'s subparsers."""
    config = sub.add_parser(
        "config",
        help="show the effective settings",
        description="Print every setting (EMQ_* variable) with its value and where it came "
        "from (env, the config file, default); secrets (tokens, ZooKeeper credentials, "
        "passwords in URLs) as ***.",
    )
    config.add_argument("action", choices=["show"])
    config.add_argument("--json", action="store_true", help="print JSON")
    config.set_defaults(func=cmd_config)
