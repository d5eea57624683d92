"""dyt's modules under DistributedDataParallel: two gloo ranks started by torchrun (tests/ddp_worker.py),
on CPU through the interpreter and on the GPU through the native path (both ranks on one GPU: gloo
reduces CUDA tensors too).

DDP averages the ranks' gradients; with two ranks that is (g0 + g1) / 2, exactly, whichever rank adds:
each rank's .grad must be that, bit for bit, of the gradients an unwrapped copy computes on the same
shard. Two steps, so that a parameter DDP saw no gradient for fails the second forward ("Expected to have
finished reduction in the prior iteration"); after each SGD step both ranks hold the same parameters.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
import torch
from ddp_worker import KINDS, STEPS

pytestmark = pytest.mark.module

WORLD = 2
WORKER = pathlib.Path(__file__).with_name("ddp_worker.py")
# The parameters each kind's norm contributes, by name in the worker's nn.Sequential (the norm is [1]).
NORM_PARAMS = {"rows": {"1.alpha", "1.weight", "1.bias"}, "channels_first": {"1.alpha", "1.weight", "1.bias"},
               "packed": {"1.params"}}  # fmt: skip


def _run_ranks(kind: str, seed: int, out: pathlib.Path) -> list:
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("this torch build has no gloo backend (torch.distributed.is_gloo_available() is False)")
    env = dict(os.environ)
    tests = pathlib.Path(__file__).parent
    env["PYTHONPATH"] = os.pathsep.join([str(tests.parent), env.get("PYTHONPATH", "")])
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # ranks on one host; the hostname may not resolve here
    env["OMP_NUM_THREADS"] = "1"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}",
               str(WORKER), "--kind", kind, "--seed", str(seed), "--out", str(out)]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (
        f"torchrun exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    )
    return [torch.load(out / f"rank{r}.pt") for r in range(WORLD)]


@pytest.mark.parametrize("kind", KINDS)
def test_ddp_averages_dyts_gradients_exactly(kind, seed, tmp_path):
    ranks = _run_ranks(kind, seed, tmp_path)
    for step in range(STEPS):
        local = [r[step]["local"] for r in ranks]
        assert set(local[0]) == set(local[1]), f"step {step}: the ranks' parameters differ"
        missing = NORM_PARAMS[kind] - set(local[0])
        assert not missing, f"step {step}: no gradient for {sorted(missing)}"
        for name in NORM_PARAMS[kind]:  # the shards differ, so the average is not either rank's own
            assert not torch.equal(local[0][name], local[1][name]), f"step {step}: {name}'s shards agree"
        for rank, record in enumerate(ranks):
            ddp = record[step]["ddp"]
            where = f"step {step}, rank {rank}"
            assert set(ddp) == set(local[0]), f"{where}: DDP left gradients for {sorted(ddp)}"
            for name, got in ddp.items():
                want = (local[0][name] + local[1][name]) / WORLD
                assert got.dtype == want.dtype and got.shape == want.shape, f"{where}: {name}"
                if not torch.equal(got, want):
                    err = float((got - want).abs().max())
                    raise AssertionError(f"{where}: {name}'s DDP gradient is not the ranks' "
                                         f"average (max difference {err:.3e})")  # fmt: skip
        params = [r[step]["params"] for r in ranks]
        for name, p in params[0].items():
            assert torch.equal(p, params[1][name]), f"step {step}: rank 1's {name} differs after the step"
