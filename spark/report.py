"""``report.html`` and its charts (PNG, matplotlib): what a capacity planner reads first.

The page is static and self-contained apart from the PNGs next to it, so it opens from a
file system or a plain web server. Charts are drawn with matplotlib's object API (``Figure``,
no pyplot), which needs no display and keeps no global state.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from spark.planning import LADDER, PROJECTION_WEEKS

DPI = 100
COLORS = {"offered": "#1f77b4", "served": "#2ca02c", "quota": "#7f7f7f", "proposed": "#d62728"}
TABLE_ROWS = 20


def _times(epoch_s: Any) -> np.ndarray:
    return np.asarray(epoch_s, dtype="int64").astype("datetime64[s]")


def _save(fig: Figure, path: Path) -> str:
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    return path.name


def fleet_chart(fleet: pd.DataFrame, sizing: dict[str, Any], path: Path) -> str:
    fig = Figure(figsize=(11, 8))
    top, bottom, queued = fig.subplots(3, 1, sharex=True, height_ratios=[2, 1, 1])
    t = _times(fleet["interval_start"])
    top.plot(t, fleet["offered_rps"], lw=0.7, color=COLORS["offered"], label="offered (jobs/s)")
    top.plot(
        t, fleet["served_rps"], lw=0.7, color=COLORS["served"], label="servable at proposed quotas"
    )
    capacity = sizing["capacity_qps"]
    top.axhline(
        capacity, color="black", ls="-", lw=1.2, label=f"{sizing['active_workers']} workers"
    )
    top.axhline(
        capacity + sizing["spare_workers"] * sizing["worker_qps"],
        color="black",
        ls=":",
        lw=1,
        label=f"{sizing['workers']} workers (N+{sizing['spare_workers']})",
    )
    top.set_ylabel("jobs/s (fleet)")
    top.set_title("Fleet traffic and worker capacity")
    top.legend(loc="upper left", fontsize=8)
    top.grid(alpha=0.3)
    utilisation = 100.0 * fleet["served_rps"] / capacity if capacity else fleet["served_rps"] * 0
    bottom.plot(t, utilisation, lw=0.7, color=COLORS["proposed"])
    bottom.axhline(100, color="black", lw=1)
    bottom.set_ylabel("utilisation %\n(N workers)")
    bottom.set_ylim(0, max(110.0, float(utilisation.max()) * 1.1 if len(utilisation) else 110.0))
    bottom.grid(alpha=0.3)
    if "replayed_backlog" in fleet:
        queued.fill_between(t, fleet["replayed_backlog"], color=COLORS["proposed"], alpha=0.4)
    queued.set_ylabel("queued jobs\n(replay, fleet)")
    queued.set_ylim(bottom=0)
    queued.grid(alpha=0.3)
    fig.autofmt_xdate()
    return _save(fig, path)


def diurnal_chart(fleet: pd.DataFrame, path: Path) -> str:
    t = pd.to_datetime(fleet["interval_start"], unit="s", utc=True)
    frame = pd.DataFrame(
        {"hour": t.dt.hour, "weekend": t.dt.dayofweek >= 5, "rps": fleet["offered_rps"]}
    )
    fig = Figure(figsize=(11, 3.5))
    ax = fig.subplots()
    for weekend, label in ((False, "weekdays"), (True, "weekends")):
        part = frame[frame["weekend"] == weekend]
        if len(part):
            profile = part.groupby("hour")["rps"].mean()
            ax.plot(profile.index, profile.to_numpy(), marker="o", ms=3, label=label)
    ax.set_xlabel("hour of day (UTC)")
    ax.set_ylabel("mean offered jobs/s")
    ax.set_title("Daily cycle of the fleet")
    ax.set_xticks(range(0, 24, 2))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def quota_chart(topics: pd.DataFrame, path: Path) -> str:
    live = topics[(topics["current_qps"].fillna(0) > 0) & (topics["proposed_qps"] > 0)]
    fig = Figure(figsize=(6, 6))
    ax = fig.subplots()
    big = live["proposed_qps"] < live["current_qps"] * 0.5
    ax.scatter(live.loc[~big, "current_qps"], live.loc[~big, "proposed_qps"], s=6, alpha=0.5)
    ax.scatter(
        live.loc[big, "current_qps"],
        live.loc[big, "proposed_qps"],
        s=6,
        alpha=0.6,
        color=COLORS["proposed"],
        label="lowered by more than half (apply needs --force)",
    )
    if len(live):
        lo = max(1.0, float(min(live["current_qps"].min(), live["proposed_qps"].min())))
        hi = float(max(live["current_qps"].max(), live["proposed_qps"].max()))
        ax.plot([lo, hi], [lo, hi], color="black", lw=0.8, label="unchanged")
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("current quota (QPS)")
    ax.set_ylabel("proposed quota (QPS)")
    ax.set_title("Current and proposed quotas")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3, which="both")
    return _save(fig, path)


def topic_chart(t: Any, rows: pd.DataFrame, path: Path) -> str:
    fig = Figure(figsize=(11, 4.5))
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[2, 1])
    x = _times(rows["interval_start"])
    top.plot(x, rows["rate"], lw=0.6, color=COLORS["offered"], label="offered (jobs/s)")
    delivered = rows["delivered"] / rows["interval_s"]
    top.plot(x, delivered, lw=0.5, color=COLORS["served"], alpha=0.7, label="delivered")
    top.step(x, rows["current_qps"], where="post", color=COLORS["quota"], lw=1, label="quota then")
    top.axhline(t.proposed_qps, color=COLORS["proposed"], ls="--", lw=1.2, label="proposed quota")
    top.axhline(t.p99_rps, color="black", ls=":", lw=1, label="p99 rate")
    top.set_title(f"{t.namespace}/{t.tenant}/{t.topic}")
    top.set_ylabel("jobs/s")
    top.legend(loc="upper left", fontsize=7, ncol=5)
    top.grid(alpha=0.3)
    bottom.fill_between(
        x, rows["backlog"], step="post", color=COLORS["proposed"], alpha=0.4, label="replayed"
    )
    bottom.plot(x, rows["throttled_backlog"], lw=0.6, color="black", label="observed")
    bottom.set_ylabel("backlog (jobs)")
    bottom.set_ylim(
        bottom=0,
        top=max(1.0, float(rows["backlog"].max()), float(rows["throttled_backlog"].max())) * 1.05,
    )
    bottom.legend(loc="upper left", fontsize=7)
    bottom.grid(alpha=0.3)
    fig.autofmt_xdate()
    return _save(fig, path)


# ----------------------------------------------------------------------------- HTML


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _num(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "-"
    f = float(value)
    if f.is_integer() and abs(f) >= 10:
        return f"{int(f):,}"
    return f"{f:,.{digits}f}"


def duration(seconds: Any) -> str:
    """``90`` → ``1m 30s``; ``5400`` → ``1h 30m``."""
    if seconds is None or (isinstance(seconds, float) and np.isnan(seconds)) or seconds <= 0:
        return "-"
    s = round(float(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s" if s % 60 else f"{s // 60}m"
    days, rest = divmod(s, 86_400)
    text = f"{rest // 3600}h {rest % 3600 // 60:02d}m"
    return f"{days}d {text}" if days else text


def when(epoch_s: Any) -> str:
    if epoch_s is None or (isinstance(epoch_s, float) and np.isnan(epoch_s)):
        return "-"
    return datetime.fromtimestamp(int(epoch_s), UTC).strftime("%Y-%m-%d %H:%M")


def _pct(value: Any) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "-"
    return f"{float(value):+.1f}%"


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]], empty: str) -> str:
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    if not body:
        return f"<p class=muted>{_esc(empty)}</p>"
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fit(quota: Any, proposed: Any) -> str:
    """The quota that keeps the wait within target: ``"300 (2x)"``, or ``"> 8x"`` if none."""
    if quota is None or quota is pd.NA or (isinstance(quota, float) and np.isnan(quota)):
        return f"> {_num(float(proposed) * LADDER[-1], 0)} (8x)"
    factor = float(quota) / float(proposed) if proposed else 1.0
    return _num(quota, 0) if factor <= 1 else f"{_num(quota, 0)} ({factor:.1f}x)"


def _name(t: Any) -> str:
    return f"{t.namespace}/{t.tenant}/{t.topic}"


def _cards(plan: dict[str, Any]) -> str:
    f = plan["fleet"]
    cards = [
        ("workers", f"{f['workers']}", f"{f['active_workers']} + {f['spare_workers']} spare"),
        ("Redis shards", f"{f['redis_shards']}", f"{_num(f['redis_ops_per_s'], 0)} ops/s"),
        ("peak offered", f"{_num(f['peak_offered_rps'])}/s", f"p99 {_num(f['p99_offered_rps'])}/s"),
        ("demand", f"{_num(f['demand_qps'])}/s", f"headroom {plan['parameters']['headroom']}"),
        (
            "sum of quotas",
            f"{_num(f['proposed_quota_sum'], 0)}",
            f"now {_num(f['current_quota_sum'], 0)}",
        ),
        ("groups", f"{_num(f['proposed_groups'], 0)}", f"now {_num(f['current_groups'], 0)}"),
        (
            "peak utilisation",
            f"{100 * f['peak_utilisation']:.0f}%",
            f"mean {100 * f['mean_utilisation']:.0f}%",
        ),
    ]
    return "".join(
        f"<div class=card><div class=label>{_esc(a)}</div><div class=value>{_esc(b)}</div>"
        f"<div class=muted>{_esc(c)}</div></div>"
        for a, b, c in cards
    )


def _sections(
    topics: pd.DataFrame, charts: dict[str, str], top: pd.DataFrame, target_wait_s: float
) -> list[str]:
    active = topics[~topics["idle"]]
    delta = (active["proposed_qps"] - active["current_qps"].fillna(0)).abs()
    changes = active.assign(_abs=delta).sort_values("_abs", ascending=False)
    change_rows = [
        (
            _name(t),
            _num(t.current_qps, 0),
            _num(t.proposed_qps, 0),
            _pct(t.change_pct),
            f"{_num(t.current_groups, 0)} → {t.proposed_groups}",
            _num(t.p99_rps),
            "needs --force" if t.current_qps and t.proposed_qps < 0.5 * t.current_qps else "",
        )
        for t in changes.head(TABLE_ROWS).itertuples()
    ]
    waits = active.sort_values(["max_wait_s", "max_backlog"], ascending=False)
    wait_rows = [
        (
            _name(t),
            _num(t.proposed_qps, 0),
            _num(t.max_backlog, 0),
            duration(t.max_wait_s),
            duration(t.longest_behind_s),
            when(t.worst_at) if t.max_backlog >= 1 else "-",
            _num(t.observed_max_backlog, 0),
            _fit(t.qps_for_target_wait, t.proposed_qps),
        )
        for t in waits.head(TABLE_ROWS).itertuples()
    ]
    moving = active[active["trend"].isin(["growing", "shrinking"])].sort_values(
        "growth_per_week", ascending=False
    )
    growth_rows = [
        (
            _name(t),
            _pct(100 * t.growth_per_week),
            _num(t.p99_rps),
            _num(getattr(t, f"p99_rps_in_{PROJECTION_WEEKS}w")),
            _num(t.proposed_qps, 0),
        )
        for t in moving.head(TABLE_ROWS).itertuples()
    ]
    idle = topics[topics["idle"]]
    idle_rows = [(_name(t), _num(t.current_qps, 0)) for t in idle.head(TABLE_ROWS).itertuples()]
    top_html = "".join(
        f"<figure><img src='{_esc(charts[f'topic:{_name(t)}'])}' alt='{_esc(_name(t))}'>"
        f"<figcaption>p99 {_num(t.p99_rps)}/s, p999 {_num(t.p999_rps)}/s, peak {_num(t.peak_rps)}/s"
        f" — quota {_num(t.current_qps, 0)} → <b>{_num(t.proposed_qps, 0)}</b> "
        f"({t.proposed_groups} groups); replay: backlog {_num(t.max_backlog, 0)}, "
        f"wait {duration(t.max_wait_s)}</figcaption></figure>"
        for t in top.itertuples()
        if f"topic:{_name(t)}" in charts
    )
    return [
        "<h2>Fleet</h2>",
        f"<img src='{_esc(charts['fleet'])}' alt='fleet utilisation'>",
        f"<img src='{_esc(charts['diurnal'])}' alt='daily cycle'>",
        "<h2>Quota changes</h2>",
        f"<img class=small src='{_esc(charts['quotas'])}' alt='current and proposed quotas'>",
        _table(
            ["topic", "current", "proposed", "change", "groups", "p99 jobs/s", ""],
            change_rows,
            "no active topics",
        ),
        "<h2>Quota dry-run: the history replayed under the proposed quotas</h2>",
        "<p>Each topic's offered jobs replayed at its proposed quota (FIFO, jobs spread evenly "
        "within each interval). <b>Largest backlog</b>: jobs waiting at the worst interval end. "
        "<b>Longest wait</b>: how long the last job queued at that point waits (backlog &divide; "
        "quota). <b>Longest behind</b>: the longest stretch in which the topic's queue never "
        "emptied. Observed: the largest throttled backlog workers recorded under the quotas "
        "of the time. The last column: the smallest quota tried (up to 8x the proposal) whose "
        f"replay keeps the longest wait within {duration(target_wait_s)}.</p>",
        _table(
            [
                "topic",
                "proposed",
                "largest backlog",
                "longest wait",
                "longest behind",
                "worst at (UTC)",
                "observed backlog",
                f"quota for wait <= {duration(target_wait_s)}",
            ],
            wait_rows,
            "no active topics",
        ),
        f"<h2>Top {len(top)} topics</h2>",
        top_html or "<p class=muted>no active topics</p>",
        "<h2>Growing and shrinking topics</h2>",
        _table(
            [
                "topic",
                "trend per week",
                "p99 jobs/s",
                f"p99 in {PROJECTION_WEEKS} weeks",
                "proposed",
            ],
            growth_rows,
            "no topic grows or shrinks by 5% a week or more",
        ),
        f"<h2>Idle topics ({len(idle)})</h2>",
        "<p>Nothing offered in the whole history: the plan keeps their quotas.</p>",
        _table(["topic", "quota (kept)"], idle_rows, "none"),
    ]


DEFINITIONS = """
<h2>Definitions</h2>
<ul>
<li><b>Offered jobs</b> of an interval: <code>enqueued</code> (the API's count), summed over
sources; for a topic whose history has no enqueue counts, <code>delivered</code>.</li>
<li><b>Rate</b>: offered jobs &divide; interval length: the interval's mean. A burst shorter
than the interval is averaged away (record with a shorter interval to see it); the headroom
covers it.</li>
<li><b>p50/p99/p999/peak</b>: nearest-rank over every interval from the topic's first record to
the end of the history; intervals without a record count as 0 jobs/s.</li>
<li><b>Proposed quota</b>: p99 &times; headroom, rounded up to a 1-2-5 step no coarser than 5%
of it; <b>groups</b>: ceil(quota &divide; max group QPS), the split rule of the workers. Idle
topics keep their quota.</li>
<li><b>Trend</b>: least-squares slope of whole days' offered volume, each interval clipped at
the topic's p99 so a burst is not a trend (with a weekend term when the history has both), as a
share of the mean per week.</li>
<li><b>Workers</b>: ceil(demand &divide; per-worker capacity) + spare (N+1); demand = the
busiest interval's fleet rate &times; headroom, at most the sum of proposed quotas.
<b>Utilisation</b>: the rate servable at the proposed quotas &divide; the capacity of N
workers.</li>
<li><b>Redis shards</b>: enough primaries for the commands per second (per job: put, read,
checkpoint, trim) and for the memory of the largest fleet-wide backlog of the replay (all topics
at once) plus a minute of traffic.</li>
<li><b>Aggregation</b>: rows of several sources for one topic and interval are summed
(counters); latency p50 is delivered-weighted, p99 the largest.</li>
</ul>
"""

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1180px;color:#222}
h1{margin-bottom:0}h2{margin-top:36px;border-bottom:1px solid #ddd;padding-bottom:4px}
.muted{color:#777}.cards{display:flex;flex-wrap:wrap;gap:10px;margin:16px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:130px}
.card .label{color:#555;font-size:12px}.card .value{font-size:22px;font-weight:600}
img{max-width:100%;display:block;margin:10px 0}img.small{max-width:520px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border-bottom:1px solid #eee;padding:3px 10px;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#f6f6f6}
figure{margin:18px 0}figcaption{color:#444;font-size:13px}code{background:#f4f4f4}
"""


def write_report(
    out: Path,
    plan: dict[str, Any],
    topics: pd.DataFrame,
    fleet: pd.DataFrame,
    top: pd.DataFrame,
    top_rows: pd.DataFrame,
) -> Path:
    """Draw the charts into ``out`` and write ``out/report.html``; returns its path."""
    charts = {
        "fleet": fleet_chart(fleet, plan["fleet"], out / "fleet.png"),
        "diurnal": diurnal_chart(fleet, out / "diurnal.png"),
        "quotas": quota_chart(topics, out / "quotas.png"),
    }
    grouped = dict(tuple(top_rows.groupby("tid"))) if len(top_rows) else {}
    for i, t in enumerate(top.itertuples(), start=1):
        rows = grouped.get(t.tid)
        if rows is not None and len(rows):
            charts[f"topic:{_name(t)}"] = topic_chart(t, rows, out / f"topic_{i:02d}.png")
    h = plan["history"]
    intro = (
        f"<p class=muted>Generated {_esc(plan['generated_at'])} from "
        f"<code>{_esc(h['path'])}</code>: "
        f"{_num(h['rows'], 0)} topic-intervals, {h['topics']} topics, {when(h['first_s'])} to "
        f"{when(h['end_s'])} UTC ({h['days']:.1f} days). Headroom "
        f"{plan['parameters']['headroom']}, max {plan['parameters']['max_group_qps']} QPS per "
        f"group, {_num(plan['fleet']['worker_qps'], 0)} jobs/s per worker "
        f"({_esc(plan['fleet']['worker_qps_source'])}). Data: <a href='plan.json'>plan.json</a>, "
        "<code>topics.parquet</code>, <code>fleet.parquet</code>.</p>"
    )
    page = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        "<title>EMQ capacity plan</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>EMQ capacity plan</h1>",
        intro,
        f"<div class=cards>{_cards(plan)}</div>",
        *_sections(topics, charts, top, plan["parameters"]["target_wait_s"]),
        DEFINITIONS,
        "</body></html>",
    ]
    path = out / "report.html"
    path.write_text("\n".join(page), encoding="utf-8")
    return path
