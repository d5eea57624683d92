"""tune: the tuner's candidate launch entries are valid table entries (timing itself needs a GPU)."""

from __future__ import annotations

import pytest

from dyt import launch, tune

pytestmark = pytest.mark.tooling


@pytest.mark.parametrize("mode", ["fwd", "bwd"])
@pytest.mark.parametrize("width", [w or 16384 for w in tune.WIDTH_BUCKETS])
def test_every_candidate_plans(mode, width):
    """Each candidate, put in a table alone, gives a plan that covers the bandwidth shape."""
    rows = 2**26 // width
    for entry in tune.candidates(mode, width):
        table = {m: {b: [entry] for b in tune.BUCKET_DTYPES} for m in ("fwd", "bwd")}
        with launch.overrides(table=table):
            if mode == "fwd":
                plan = launch.plan_forward(rows, width, 2, (width, width), arch="sm90")
            else:
                plan = launch.plan_backward(rows, width, 2, (width,) * 3, sm_count=132, arch="sm90")
                assert plan.num_stages == entry["num_stages"]
        assert plan.n_col_blocks * plan.BLOCK_N >= width, entry


def test_the_backward_tries_column_blocks_from_2048():
    """Rows of 2048 ran 0.81 of the copy ceiling as one 2048-wide block, 4096-wide rows 0.91 as 1024-wide
    blocks (68e53bb): the backward's candidates split rows from 2048 on."""
    block_ns = {c["BLOCK_N"] for c in tune.candidates("bwd", 2048)}
    assert {512, 1024} <= block_ns
    assert {c["BLOCK_N"] for c in tune.candidates("bwd", 1024)} == {1024}
