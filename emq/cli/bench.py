"""``emq bench NAME``: run a benchmark and print its figures (JSON with ``--json``).

Each benchmark module is imported only when it runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from emq.core.errors import EmqError

if TYPE_CHECKING:
    from emq.cli.common import Subparsers
    from emq.core.settings import Settings


BENCHES = [
    "enqueue", "dispatch", "plan", "faults", "promises", "regroup", "plan-accuracy", "replay",
    "endpoints", "push-clients", "peers", "tenant-quota", "signals", "fanout", "transactions",
    "schedules", "all",
]  # fmt: skip
# Each bench's own options: which benches take each (by its argparse ``dest``). One given to a
# bench that does not take it is refused before anything starts, not silently ignored.
_DURATION = {
    "enqueue", "dispatch", "faults", "promises", "regroup", "replay", "endpoints",
    "push-clients", "peers", "tenant-quota", "signals", "schedules", "all",
}  # fmt: skip
APPLIES: dict[str, set[str]] = {
    "rows": {"plan", "all"},
    "duration_s": _DURATION,
    "seeds": {"promises", "faults", "regroup"},
    "seed": {"promises"},
    "log": {"promises"},
    "trials": {"faults"},
    "competitor": {"dispatch"},
    "workload": {"dispatch", "peers"},
    "topics": {"dispatch"},
    "quota": {"dispatch"},
    "noop": {"dispatch"},
    "redis_rtt_ms": {"dispatch", "promises"},
    "out": {"all", "faults", "promises", "plan-accuracy"},
    "durability": {"enqueue"},
    "concurrency": {"push-clients"},
    "api_processes": {"enqueue"},
    "qps": {"replay"},
    "letters": {"replay"},
    "rate": {"replay"},
    "history": {"plan-accuracy"},
    "compress": {"plan-accuracy"},
    "at_quota": {"plan-accuracy"},
    "start": {"plan-accuracy"},
}


def check_applies(args: argparse.Namespace, defaults: dict[str, object]) -> None:
    """One :class:`EmqError` line for the first option given that ``args.name`` does not take
    (an option is given when its value is not its default)."""
    for dest, benches in APPLIES.items():
        if args.name in benches or getattr(args, dest) == defaults[dest]:
            continue
        flag = "--" + dest.replace("_", "-")
        takers = ", ".join(sorted(benches))
        raise EmqError(f"{flag} is not an option of `emq bench {args.name}` (it is of: {takers})")


def cmd_bench(args: argparse.Namespace, settings: Settings) -> int:
    check_applies(args, args.bench_defaults)
    if args.name == "faults":
        from emq.bench import faults

        say = lambda s: print(s, file=sys.stderr)  # noqa: E731
        doc = faults.run_cli(args.trials, args.duration_s, say, seeds=args.seeds)
        if args.out:
            Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
        print(json.dumps(doc, indent=2) if args.json else faults.summary(doc))
        return 0 if doc["pass"] else 1
    if args.name == "promises":
        from emq.bench import mixed

        say = lambda s: print(s, file=sys.stderr)  # noqa: E731
        if args.redis_rtt_ms:  # issue 32: Redis a hop away (emq.bench.netlink_promises)
            from emq.bench import netlink_promises as hop
            from emq.bench.netlink import parse_rtts

            if args.seed or args.log:
                raise EmqError("--seed and --log run without --redis-rtt-ms")
            rtts = parse_rtts(args.redis_rtt_ms)
            doc, summary = hop.run_cli(args.seeds, args.duration_s, rtts, say=say), hop.summary
        else:
            doc = mixed.run_cli(args.seeds, args.duration_s, say, args.seed or (), args.log)
            summary = mixed.summary
        if args.out:
            Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
        print(json.dumps(doc, indent=2) if args.json else summary(doc))
        return 0 if doc["ok"] else 1
    if args.name == "regroup":  # issue 31: a group-count change under load (emq.bench.regroup)
        from emq.bench import regroup

        doc = regroup.run_cli(args.seeds, args.duration_s, say=lambda s: print(s, file=sys.stderr))
        print(json.dumps(doc, indent=2) if args.json else regroup.summary(doc))
        return 0 if doc["ok"] else 1
    if args.name == "plan-accuracy":  # issue 31: the dry-run against a fleet
        from emq.bench import plan_accuracy

        doc = plan_accuracy.run_cli(args, say=lambda s: print(s, file=sys.stderr))
        if args.out:
            Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
        print(json.dumps(doc, indent=2) if args.json else plan_accuracy.summary(doc))
        return 0 if doc["summary"]["pass"] else 1
    if args.name == "replay":
        from emq.bench import replay

        doc = replay.run(
            args.qps, args.letters, args.rate, args.duration_s or 20.0,
            say=lambda s: print(s, file=sys.stderr),
        )  # fmt: skip
        print(json.dumps(doc, indent=2) if args.json else replay.summary(doc))
        return 0
    if args.name == "transactions":  # issue 30: a transaction's cost (emq.bench.transactions)
        from emq.bench import transactions

        doc = transactions.run(say=lambda s: print(s, file=sys.stderr))
        print(json.dumps(doc, indent=2) if args.json else transactions.summary(doc))
        return 0 if doc["pass"] else 1
    if args.name == "endpoints":  # issue 16: the adaptive per-endpoint rate (emq.bench.endpoints)
        from emq.bench import endpoints

        doc = endpoints.run(args.duration_s or 30.0)
        print(json.dumps(doc, indent=2) if args.json else endpoints.summary(doc))
        return 0 if doc["pass"] else 1
    if args.name == "fanout":  # issue 28: events to 10 and 100 subscriptions (emq.bench.fanout)
        from emq.bench import fanout

        doc = fanout.run()
        print(json.dumps(doc, indent=2) if args.json else fanout.summary(doc))
        return 0
    if args.name == "peers" and args.workload == "paced":  # issue 32 (emq.bench.peers_paced)
        from emq.bench import peers_paced

        doc = peers_paced.run(args.duration_s or 10.0, say=lambda s: print(s, file=sys.stderr))
        print(json.dumps(doc, indent=2) if args.json else peers_paced.summary(doc))
        return 0
    if args.name == "peers" and args.workload != "all":
        raise EmqError(f"peers runs its own workload or --workload paced, not {args.workload!r}")
    if args.name == "peers":  # issue 14: EMQ against BullMQ (emq.bench.peers)
        from emq.bench import peers

        doc = peers.run(args.duration_s or 5.0, say=lambda s: print(s, file=sys.stderr))
        print(json.dumps(doc, indent=2) if args.json else peers.summary(doc))
        return 0
    if args.name == "schedules":  # issue 28: the schedule firer (emq.bench.schedules)
        from emq.bench import schedules

        doc = schedules.run(idle_s=args.duration_s or 20.0)
        print(json.dumps(doc, indent=2) if args.json else schedules.summary(doc))
        return 0 if doc["pass"] else 1
    if args.name == "push-clients":  # issue 14: the push path's HTTP client candidates
        from emq.bench import push_clients

        duration_s = 3.0 if args.duration_s is None else args.duration_s
        doc = push_clients.run(args.concurrency, duration_s)
        print(json.dumps(doc, indent=2) if args.json else push_clients.summary(doc))
        return 0
    if args.duration_s is None:
        args.duration_s = 10.0
    if args.name == "tenant-quota":
        return _tenant_quota(args)
    if args.name == "all":
        from emq.bench import suite

        # Checked before the first part runs, not minutes later when the plan bench starts.
        if args.duration_s <= 0:
            raise EmqError("--duration-s must be greater than 0")
        if args.rows < suite.MIN_ROWS:
            raise EmqError(f"--rows must be at least {suite.MIN_ROWS} (one topic-week of minutes)")
        doc = suite.run(args.duration_s, args.rows, say=lambda s: print(s, file=sys.stderr))
        if args.out:
            Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
        print(json.dumps(doc, indent=2) if args.json else doc["markdown"])
        return 0
    if args.name == "plan":
        from emq.cli.capacity import cmd_bench_plan

        return cmd_bench_plan(args, settings)
    if args.name == "signals":  # issue 14: ready signals addressed to owners
        from emq.bench import signals

        doc = signals.run(duration_s=args.duration_s)
        print(json.dumps(doc, indent=2) if args.json else signals.summary(doc))
        return 0
    if args.name == "dispatch":
        from emq.bench import dispatch
        from emq.bench.netlink import parse_rtts

        result = dispatch.run(
            args.workload,
            noop=args.noop,
            duration_s=args.duration_s,
            competitor=args.competitor,
            redis_rtt_ms=parse_rtts(args.redis_rtt_ms) if args.redis_rtt_ms else (),
            topics=args.topics,
            quotas=args.quota,
        )
        print(json.dumps(result, indent=2) if args.json else dispatch.summary(result))
        return 0
    from emq.bench import enqueue

    if args.api_processes:
        return _enqueue_scaling(args)
    if args.durability == "compare":
        result = enqueue.compare(duration_s=args.duration_s)
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            for mode, figures in result["modes"].items():
                print(f"{mode:<8} " + "  ".join(f"{k} {v}" for k, v in figures.items()))
        return 0
    result = enqueue.run(duration_s=args.duration_s, durability=args.durability)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key in ("jobs_per_s", "requests_per_s", "p50_ms", "p99_ms"):
            print(f"{key:<16} {result[key]}")
    return 0


def _enqueue_scaling(args: argparse.Namespace) -> int:
    from emq.bench import enqueue_scaling

    try:
        counts = [int(p) for p in args.api_processes.split(",")]
    except ValueError:
        raise EmqError(
            f"--api-processes takes counts like 1,2, not {args.api_processes!r}"
        ) from None
    result = enqueue_scaling.run(counts, duration_s=args.duration_s)
    print(json.dumps(result, indent=2) if args.json else enqueue_scaling.summary(result))
    return 0


def _tenant_quota(args: argparse.Namespace) -> int:
    import uvloop

    from emq.bench import tenant_quota

    say = lambda s: print(s, file=sys.stderr)  # noqa: E731
    result = uvloop.run(tenant_quota.run(args.duration_s, say))
    print(json.dumps(result, indent=2) if args.json else tenant_quota.summary(result))
    return 0 if result["ok"] else 1


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")


def add_commands(sub: Subparsers) -> None:
    """Register ``bench`` on ``emq``'s subparsers."""
    bench = sub.add_parser(
        "bench",
        help="run a benchmark and print its figures",
        description="Benchmarks start their own servers on free loopback ports and print the "
        "measured figures (JSON with --json), with a description of the machine.",
    )
    bench.add_argument("name", choices=BENCHES)
    bench.add_argument(
        "--rows", type=int, default=10_000_000, help="plan: rows of synthetic history (10M)"
    )
    bench.add_argument(
        "--duration-s",
        type=float,
        default=None,
        help="seconds per run (10); faults: the length of each timed fault (ZooKeeper outage, "
        "hanging window, Redis load; the trials' own defaults if not given); promises: the "
        "length of each seed's run (30); regroup: each seed's three phases together (15); "
        "peers: 500 jobs per tenant per second of it (5)",
    )
    bench.add_argument(
        "--seeds",
        type=int,
        default=3,
        help="promises: run the randomized mixed workloads of seeds 1..N (3); faults: run "
        "cluster_failover once per seed 1..N; regroup: one run per seed 1..N",
    )
    bench.add_argument(
        "--seed",
        type=int,
        action="append",
        metavar="K",
        help="promises: run seed K only (repeat for several; instead of --seeds)",
    )
    bench.add_argument(
        "--log",
        metavar="DIR",
        help="promises: keep each seed's delivery log and checker inputs in DIR/seed-K.json",
    )
    bench.add_argument(
        "--trials",
        default="",
        help="faults: comma-separated trials (worker_kill,redis_restart,zk_outage,sigstop,"
        "hanging,poison,zk_quorum,cluster_failover; default all)",
    )
    bench.add_argument(
        "--competitor",
        action="store_true",
        help="dispatch W3: run a busy-loop process beside the worker (pacing under CPU theft)",
    )
    bench.add_argument(
        "--workload",
        choices=[
            "W2",
            "W3",
            "W4",
            "W5",
            "W6",
            "W6b",
            "W7",
            "W8",
            "W9",
            "W10",
            "W11",
            "W12",
            "paced",
            "all",
        ],
        default="all",
        help="dispatch: which worker workload (default: all; paced is run only when named); "
        "peers: paced compares ten tenants at quota 100, one flooding",
    )
    bench.add_argument(
        "--topics", metavar="N,M", help="dispatch paced: topic counts to run (10,100,1000)"
    )
    bench.add_argument(
        "--quota", metavar="Q,R", help="dispatch paced: each topic's quota to run (10,100)"
    )
    bench.add_argument(
        "--noop", action="store_true", help="dispatch W2: deliver nothing, measure CPU per job"
    )
    bench.add_argument(
        "--redis-rtt-ms",
        metavar="MS[,MS...]",
        help="dispatch: also run with the worker reaching Redis through a delaying proxy, at 0 ms "
        "and at each round-trip time given (e.g. 0.5,2); --workload all means W2, W3, W5 and "
        "paced (100 topics x quota 10 unless --topics/--quota); promises: run the seeds at each "
        "round-trip time given instead, workers and API through the proxy",
    )
    bench.add_argument(
        "--out",
        metavar="FILE",
        help="all, faults, promises, plan-accuracy: also write the JSON document to FILE",
    )
    bench.add_argument(
        "--durability",
        choices=["default", "fsync", "replica", "compare"],
        default="default",
        help="enqueue: EMQ_DURABILITY of the API and the Redis it starts (fsync: appendfsync "
        "always; replica: plus one replica); compare: the three interleaved, 3 rounds, medians",
    )
    bench.add_argument(
        "--concurrency", type=int, default=64, help="push-clients: requests at once (64)"
    )
    bench.add_argument(
        "--api-processes",
        metavar="N,M",
        help="enqueue: run `emq api --workers N` for each count given (e.g. 1,2) on the same "
        "servers instead: single jobs and batches, with the CPU per 1000 requests of the API, "
        "the load generators and Redis",
    )
    bench.add_argument("--qps", type=int, default=1000, help="replay: the topic's quota (1000)")
    bench.add_argument(
        "--letters", type=int, default=100_000, help="replay: dead letters to replay (100000)"
    )
    bench.add_argument(
        "--rate", type=float, default=None, help="replay: the replay's rate (5%% of --qps)"
    )
    from emq.bench.plan_accuracy import add_arguments as plan_accuracy_arguments

    plan_accuracy_arguments(bench)
    _json_flag(bench)
    defaults = {dest: bench.get_default(dest) for dest in APPLIES}
    bench.set_defaults(func=cmd_bench, bench_defaults=defaults)
