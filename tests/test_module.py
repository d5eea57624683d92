"""module: the nn.Module and its checkpoints, LayerNorm conversion, channels-first input, empty input,
torch.compile(fullgraph=True) of a small model, and CUDA graph capture and replay."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import dyt

from helpers import check_against_reference, device, make_inputs, on_gpu, run

pytestmark = pytest.mark.module


class PaperDynamicTanh(nn.Module):
    """The paper's reference module, as published (parameter names and defaults are the contract)."""

    def __init__(self, normalized_shape, channels_last, alpha_init_value=0.5):
        super().__init__()
        self.channels_last = channels_last
        self.alpha = nn.Parameter(torch.ones(1) * alpha_init_value)
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        x = torch.tanh(self.alpha * x)
        if self.channels_last:
            return x * self.weight + self.bias
        return x * self.weight[:, None, None] + self.bias[:, None, None]


def test_parameters_and_defaults():
    m = dyt.DyT(48)
    assert [n for n, _ in m.named_parameters()] == ["alpha", "weight", "bias"]
    assert m.alpha.shape == (1,) and float(m.alpha) == 0.5
    assert torch.equal(m.weight, torch.ones(48)) and torch.equal(m.bias, torch.zeros(48))
    assert dyt.DyT(48, bias=False).bias is None
    assert float(dyt.DyT(8, alpha_init=2.0).alpha) == 2.0


@pytest.mark.parametrize("channels_last", [True, False])
def test_paper_checkpoint_loads_and_matches(channels_last, seed):
    torch.manual_seed(seed)
    paper = PaperDynamicTanh(32, channels_last)
    with torch.no_grad():
        paper.alpha.fill_(0.8)
        paper.weight.normal_()
        paper.bias.normal_()
    ours = dyt.DyT(32, channels_last=channels_last)
    ours.load_state_dict(paper.state_dict())
    paper, ours = paper.to(device()), ours.to(device())
    shape = (6, 9, 32) if channels_last else (2, 32, 5, 7)
    x = torch.randn(shape, device=device())
    ref = paper.double()(x.double())
    got = ours(x)
    assert got.shape == x.shape
    assert float((got.double() - ref).norm() / ref.norm()) < 1e-6


def test_channels_first_gradients(seed):
    m = dyt.DyT(24, channels_last=False, device=device())
    x = torch.randn(2, 24, 3, 5, device=device(), requires_grad=True)
    x_cl = x.detach().to(memory_format=torch.channels_last).requires_grad_()
    for inp in (x, x_cl):
        y = m(inp)
        y.square().sum().backward()
    ref = PaperDynamicTanh(24, False).to(device())
    xr = x.detach().clone().requires_grad_()
    ref(xr).square().sum().backward()
    assert torch.allclose(x.grad, xr.grad, rtol=1e-5, atol=1e-6)
    assert torch.allclose(x_cl.grad, xr.grad, rtol=1e-5, atol=1e-6)


def test_convert_layernorm():
    model = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(),
                          nn.Sequential(nn.LayerNorm(32, bias=False), nn.Linear(32, 4)))  # fmt: skip
    out = dyt.convert_layernorm(model, alpha_init=0.7)
    assert out is model
    assert isinstance(model[1], dyt.DyT) and model[1].bias is not None and model[1].num_features == 32
    assert isinstance(model[3][0], dyt.DyT) and model[3][0].bias is None
    assert float(model[1].alpha) == pytest.approx(0.7)
    assert not any(isinstance(m, nn.LayerNorm) for m in model.modules())
    assert isinstance(dyt.convert_layernorm(nn.LayerNorm(8)), dyt.DyT)


@pytest.mark.parametrize("shape", [(0, 64), (3, 0, 64), (0, 5000)], ids=str)
def test_empty_input(shape, seed):
    inp = make_inputs(shape, torch.bfloat16, seed=seed, param_dtype=torch.float32)
    y, dx, da, dg, db = run(inp)
    assert y.shape == shape and dx.shape == shape
    assert torch.equal(da.cpu(), torch.zeros(1)) and torch.equal(dg.cpu(), torch.zeros(shape[-1]))
    assert torch.equal(db.cpu(), torch.zeros(shape[-1])) and dg.dtype == torch.float32


class _Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm1 = dyt.DyT(width)
        self.fc = nn.Linear(width, width)
        self.norm2 = dyt.DyT(width, bias=False)

    def forward(self, x):
        return self.norm2(x + self.fc(self.norm1(x)))


def test_torch_compile_fullgraph_small_model(seed):
    torch.manual_seed(seed)
    model = _Block(64).to(device())
    x = torch.randn(8, 16, 64, device=device())
    backend = "inductor" if on_gpu() else "aot_eager"
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    y_c = compiled(x)
    y_c.square().mean().backward()
    grads_c = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    y_e = model(x)
    y_e.square().mean().backward()
    assert torch.allclose(y_c, y_e, rtol=1e-5, atol=1e-5)
    for gc, p in zip(grads_c, model.parameters(), strict=True):
        assert torch.allclose(gc, p.grad, rtol=1e-4, atol=1e-6)


def test_custom_ops_are_registered_with_fake_kernels():
    import dyt.ops  # noqa: F401  (importing the ops module is what registers torch.ops.dyt)

    x = torch.empty(4, 7, 96, device="meta", dtype=torch.bfloat16)
    a, g = torch.empty(1, device="meta"), torch.empty(96, device="meta")
    assert torch.ops.dyt.forward(x, a, g, None).shape == x.shape
    dx, da, dg, db = torch.ops.dyt.backward(x, x, a, g, None)
    assert (dx.dtype, da.dtype, dg.shape) == (torch.bfloat16, torch.float32, (96,))


@pytest.mark.gpu_only
def test_cuda_graph_capture_and_replay(seed):
    inp = make_inputs((4096, 256), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    static_x = inp.x.detach().clone().requires_grad_()
    params = [inp.alpha, inp.gamma, inp.beta]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm up: compile the kernels outside the capture
            dyt.dyt(static_x, *params).backward(inp.dy)
    torch.cuda.current_stream().wait_stream(stream)
    for t in [static_x, *params]:
        t.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = dyt.dyt(static_x, *params)
        static_y.backward(inp.dy)
    for trial in range(2):
        fresh = make_inputs((4096, 256), torch.bfloat16, seed=seed + 1 + trial, param_dtype=torch.float32)
        with torch.no_grad():
            static_x.copy_(fresh.x)
            for t in [static_x, *params]:
                t.grad.zero_() if t.grad is not None else None
        graph.replay()
        torch.cuda.synchronize()
        fresh.alpha, fresh.gamma, fresh.beta, fresh.dy = inp.alpha, inp.gamma, inp.beta, inp.dy
        outs = (static_y.detach(), static_x.grad, inp.alpha.grad, inp.gamma.grad, inp.beta.grad)
        check_against_reference(fresh, outs)


def test_tensors_on_a_gpu_that_is_not_the_current_one(seed):
    """Triton launches on the current device; dyt makes the tensors' GPU current for its launches. Checked
    in a child process that sees every GPU of the run (the GPU matrix pins one GPU per worker)."""
    gpus = [g for g in os.environ.get("DYT_GPUS", "").split(",") if g]
    if len(gpus) < 2 and not (torch.cuda.is_available() and torch.cuda.device_count() >= 2):
        pytest.skip("needs two GPUs: tensors on cuda:1 while cuda:0 is current")
    env = dict(os.environ)
    if len(gpus) >= 2:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    tests = pathlib.Path(__file__).parent
    env["PYTHONPATH"] = os.pathsep.join([str(tests.parent), str(tests), env.get("PYTHONPATH", "")])
    code = textwrap.dedent(f"""
        import torch
        from helpers import check_against_reference, make_inputs, run
        assert torch.cuda.device_count() >= 2
        with torch.cuda.device(0):
            inp = make_inputs((300, 256), torch.bfloat16, seed={seed}, dev=torch.device("cuda:1"))
            check_against_reference(inp, run(inp))
        print("checked on cuda:1 with cuda:0 current")
    """)  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "checked on cuda:1" in out.stdout, out.stdout[-2000:] + out.stderr[-3000:]
