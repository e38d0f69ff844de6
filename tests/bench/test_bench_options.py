"""``emq bench NAME``: an option of another bench is one clear error before anything starts,
never silently ignored; every documented invocation is accepted."""

from __future__ import annotations

import shlex
import time

import pytest

from emq.cli.bench import APPLIES, BENCHES, check_applies
from emq.cli.main import build_parser, main


@pytest.mark.parametrize(
    ("argv", "flag", "takers"),
    [
        ("faults --redis-rtt-ms 2", "--redis-rtt-ms", "dispatch, promises"),
        ("transactions --duration-s 5", "--duration-s", "all, dispatch"),
        ("dispatch --seed 3", "--seed", "promises"),
        ("plan --workload W2", "--workload", "dispatch, peers"),
        ("promises --at-quota orders=5", "--at-quota", "plan-accuracy"),
        ("replay --out doc.json", "--out", "all, faults, plan-accuracy, promises"),
        ("enqueue --noop", "--noop", "dispatch"),
        ("fanout --seeds 2", "--seeds", "faults, promises, regroup"),
    ],
)
def test_an_option_of_another_bench_is_refused_at_once(
    argv: str, flag: str, takers: str, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    assert main(["bench", *shlex.split(argv)]) == 1
    assert time.monotonic() - started < 5  # (refused before any server starts: a bench takes 10+)
    out, err = capsys.readouterr()
    name = argv.split()[0]
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"emq: error: {flag} is not an option of `emq bench {name}`")
    assert f"(it is of: {takers}" in err


def test_the_table_names_real_options_and_benches() -> None:
    args = build_parser().parse_args(["bench", "all"])
    assert set(APPLIES) <= set(vars(args))
    assert set().union(*APPLIES.values()) <= set(BENCHES)


@pytest.mark.parametrize(
    "argv",
    [
        "all --json --out FILE",
        "dispatch --redis-rtt-ms 0.5,2 --duration-s 5 --json",
        "dispatch --workload paced --topics 10,100 --quota 10,100 --duration-s 5",
        "dispatch --workload W2 --noop",
        "dispatch --workload W3 --competitor",
        "enqueue --api-processes 1,2",
        "enqueue --durability compare",
        "faults --trials cluster_failover --seeds 3 --json --out failover.json",
        "faults --trials zk_quorum --duration-s 30 --json",
        "peers --workload paced",
        "plan --rows 10000000 --json",
        "plan-accuracy --history history/ --at-quota orders=120 --compress 30",
        "plan-accuracy --json --out docs/data/plan-accuracy.json",
        "promises --json --seeds 2 --duration-s 10",
        "promises --seed 1 --log DIR",
        "promises --redis-rtt-ms 0.5,2 --seeds 2",
        "push-clients --concurrency 32 --duration-s 2",
        "replay --qps 500 --letters 1000 --rate 20",
        "regroup --seeds 2 --duration-s 15",
        "transactions --json",
        "fanout --json",
    ],
)
def test_every_documented_invocation_is_accepted(argv: str) -> None:
    args = build_parser().parse_args(["bench", *shlex.split(argv)])
    check_applies(args, args.bench_defaults)
