"""Placed job ids: the group and priority read back from the id; other ids are not placed."""

from __future__ import annotations

import itertools
import random
import time

from emq.core.jobs import JobPlace, base32_digits, job_place, placed_job_id, placed_job_ids
from emq.core.model import PRIORITIES, Priority, new_job_id


def test_a_placed_id_reads_back_its_time_group_and_priority() -> None:
    now = int(time.time() * 1000)
    for group in (0, 1, 6, 999, 500_000):
        for p in PRIORITIES:
            job_id = placed_job_id(now, group, p)
            assert len(job_id) == 30 and job_id.startswith("msg_")
            assert job_place(job_id) == JobPlace(now, group, p)


def test_placed_ids_sort_by_time_and_are_unique() -> None:
    base = 1_700_000_000_000
    per_ms = [[placed_job_id(base + ms, 3, Priority.LOW) for _ in range(10)] for ms in range(100)]
    for earlier, later in itertools.pairwise(per_ms):
        assert max(earlier) < min(later)  # within one millisecond, any order
    assert len({i for ids in per_ms for i in ids}) == 1000


def test_ids_that_are_not_placed_ids_have_no_place() -> None:
    for text in ("", "msg_", "msg_" + "u" * 26, "job_" + "0" * 26, "msg_" + "0" * 25, "x" * 30):
        assert job_place(text) is None
    unplaced = [new_job_id() for _ in range(200)]
    assert any(job_place(i) is None for i in unplaced)  # half of them carry no "placed" bit


def test_base32_digits_are_the_crockford_digits_of_the_number() -> None:
    rng = random.Random(7)
    for n in [
        0,
        1,
        31,
        32,
        1023,
        1024,
        (1 << 130) - 1,
        *(rng.getrandbits(130) for _ in range(2000)),
    ]:
        digits, m = [], n
        for _ in range(26):
            m, r = divmod(m, 32)
            digits.append("0123456789abcdefghjkmnpqrstvwxyz"[r])
        assert base32_digits(n) == "".join(reversed(digits))


def test_a_placed_id_is_the_base32_of_its_time_and_place() -> None:
    for now in (0, 1, 1_700_000_000_123, (1 << 48) - 1):
        job_id = placed_job_id(now, 77, Priority.HIGH)
        assert job_id[4:14] == base32_digits(now << 80)[:10]
        assert job_place(job_id) == JobPlace(now, 77, Priority.HIGH)


def test_a_batch_of_placed_ids_reads_back_like_single_ones() -> None:
    """``placed_job_ids`` (one draw and spelling for a batch) makes ids of the same form."""
    now = 1_763_990_000_123
    places = [(g, p) for g in (0, 1, 6, 999, 500_000, (1 << 19) - 1) for p in PRIORITIES] * 50
    ids = placed_job_ids(now, places)
    assert len(ids) == len(places) == len(set(ids))
    for job_id, (group, p) in zip(ids, places, strict=True):
        assert len(job_id) == 30 and job_id.startswith("msg_")
        assert job_place(job_id) == JobPlace(now, group, p)
        # the same time and group digits as the one-at-a-time function's
        assert job_id[:18] == placed_job_id(now, group, p)[:18]
    assert placed_job_ids(now, []) == []


def test_a_batch_spreads_its_random_digits_over_the_whole_alphabet() -> None:
    ids = placed_job_ids(1_763_990_000_123, [(3, Priority.LOW)] * 2000)
    for position in range(19, 30):  # the 11 fully random digits
        assert len({i[position] for i in ids}) == 32
    # the rank's digit carries 3 random bits: 8 values per priority
    assert len({i[18] for i in ids}) == 8


def test_a_group_out_of_range_is_clamped_as_one_at_a_time() -> None:
    now = 1_700_000_000_000
    [batch] = placed_job_ids(now, [(1 << 25, Priority.HIGH)])
    assert job_place(batch) == job_place(placed_job_id(now, 1 << 25, Priority.HIGH))
