"""vgraph_C::argmax_rows (the sampler's greedy tokens on CUDA) against torch.argmax on the CPU:
the largest value, NaN above every number, the lowest index among equals, whichever number of
CTAs (one thread-block cluster) a row is cut into (VGRAPH_ARGMAX_PARTS; unset: the launcher's),
for float32 logits and the 16-bit ones of the fused LM head."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tests.kernels.devices import cuda_param
from vgraph.sample.sampler import greedy_tokens

CUDA = cuda_param("argmax_rows")
VOCABS = [97, 49152, 128256, 151936]  # odd (scalar loads), then the shipped configs'
PARTS = pytest.mark.parametrize("parts", [None, "1", "3", "8"], ids=["auto", "p1", "p3", "p8"])
DTYPES = pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"]
)


def set_parts(monkeypatch, parts: str | None) -> None:
    if parts is None:
        monkeypatch.delenv("VGRAPH_ARGMAX_PARTS", raising=False)
    else:
        monkeypatch.setenv("VGRAPH_ARGMAX_PARTS", parts)


def oracle(logits: torch.Tensor) -> torch.Tensor:
    return logits.cpu().argmax(dim=-1)


def run(logits: torch.Tensor) -> torch.Tensor:
    out = torch.empty(logits.shape[0], dtype=torch.long, device=logits.device)
    torch.ops.vgraph_C.argmax_rows(out, logits)
    return out.cpu()


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("rows", [1, 3, 16])
@PARTS
@DTYPES
def test_random_rows(
    monkeypatch, device: str, vocab: int, rows: int, parts: str | None, dtype: torch.dtype
) -> None:
    set_parts(monkeypatch, parts)
    g = torch.Generator().manual_seed(vocab + rows)
    logits = (torch.randn(rows, vocab, generator=g) * 4).to(dtype)  # 16-bit: many equal values
    assert torch.equal(run(logits.to(device)), oracle(logits))


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize("vocab", VOCABS)
@PARTS
@DTYPES
def test_ties_nan_and_inf(
    monkeypatch, device: str, vocab: int, parts: str | None, dtype: torch.dtype
) -> None:
    set_parts(monkeypatch, parts)
    g = torch.Generator().manual_seed(vocab)
    logits = torch.randn(7, vocab, generator=g)
    logits[0, [vocab - 1, vocab // 3, vocab // 2]] = 50.0  # equal maxima: the lowest index wins
    logits[1, :] = 1.0  # every entry equal: index 0
    logits[2, :] = float("-inf")  # nothing but -inf: index 0
    logits[3, [vocab // 2, vocab - 2]] = float("nan")  # NaN wins over every number: the first
    logits[4, vocab - 1] = float("inf")
    logits[5, :] = float("-inf")
    logits[5, vocab - 1] = -1e30  # the only finite entry is the last
    logits[6, 0] = 1e30  # the first entry (float16: -inf / inf)
    logits = logits.to(dtype)
    assert torch.equal(run(logits.to(device)), oracle(logits))


@pytest.mark.parametrize("device", [CUDA])
@PARTS
def test_strided_and_misaligned_rows(monkeypatch, device: str, parts: str | None) -> None:
    set_parts(monkeypatch, parts)
    g = torch.Generator().manual_seed(0)
    wide = torch.randn(5, 49160, generator=g)
    for view in (wide[:, :49152], wide[:, 1:49153], wide[::2, 3:1003]):
        assert torch.equal(run(view.to(device)), oracle(view))


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize("value", ["0", "9", "two"])
def test_parts_switch_rejects_bad_values(monkeypatch, device: str, value: str) -> None:
    monkeypatch.setenv("VGRAPH_ARGMAX_PARTS", value)
    with pytest.raises(RuntimeError, match="VGRAPH_ARGMAX_PARTS must be an integer in"):
        run(torch.randn(2, 1000, device=device))


@pytest.mark.parametrize("device", [CUDA])
def test_plain_launch_switch_and_graph_replay(monkeypatch, device: str) -> None:
    """The kernel waits for the previous one (it is launched with PDL behind the LM head):
    behind a kernel that writes its rows, eagerly and replayed in a CUDA graph with new inputs,
    it reads what that kernel wrote, as with VGRAPH_ARGMAX_PDL=0 (a plain launch); a bad value
    is refused."""
    g = torch.Generator().manual_seed(5)
    inputs = [torch.randn(3, 49152, generator=g) * 4 for _ in range(3)]
    inp = inputs[0].to(device)
    logits = torch.empty_like(inp)
    out = torch.empty(3, dtype=torch.long, device=device)

    def step() -> None:
        torch.mul(inp, 2, out=logits)  # the writer right before the kernel
        torch.ops.vgraph_C.argmax_rows(out, logits)

    for value in ("1", "0"):
        monkeypatch.setenv("VGRAPH_ARGMAX_PDL", value)
        inp.copy_(inputs[0])
        step()
        assert torch.equal(out.cpu(), oracle(inputs[0]))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        for x in inputs[1:]:
            inp.copy_(x)
            graph.replay()
            assert torch.equal(out.cpu(), oracle(x))
    monkeypatch.setenv("VGRAPH_ARGMAX_PDL", "2")
    with pytest.raises(RuntimeError, match="VGRAPH_ARGMAX_PDL must be an integer in"):
        run(logits)


@pytest.mark.parametrize("device", [CUDA])
def test_sampler_greedy_tokens_use_the_kernel_and_agree(device: str) -> None:
    logits = torch.randn(4, 49152, device=device)
    assert torch.equal(greedy_tokens(logits).cpu(), oracle(logits))
    for low in (logits.bfloat16(), logits.half()):  # the fused LM head's logits
        assert torch.equal(greedy_tokens(low).cpu(), oracle(low))


def test_greedy_tokens_on_the_cpu_are_torch_argmax() -> None:
    logits = torch.randn(3, 1000)
    logits[1, [5, 9]] = 100.0
    assert torch.equal(greedy_tokens(logits), logits.argmax(dim=-1))


@pytest.mark.parametrize("device", [CUDA])
def test_bad_arguments_raise(device: str) -> None:
    """Checked in a child process, so a crash cannot end the run."""
    code = (
        "import torch\n"
        "from vgraph._ext import load_ext\n"
        "load_ext()\n"
        "logits = torch.randn(2, 10, device='cuda')\n"
        "for out, x in [(torch.empty(3, dtype=torch.long, device='cuda'), logits),\n"
        "               (torch.empty(2, dtype=torch.int32, device='cuda'), logits),\n"
        "               (torch.empty(2, dtype=torch.long, device='cuda'), logits.double())]:\n"
        "    try:\n"
        "        torch.ops.vgraph_C.argmax_rows(out, x)\n"
        "    except RuntimeError as e:\n"
        "        print('raised:', str(e).splitlines()[0])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 3 and lines[0].startswith("raised: out must be a contiguous int64 [2]")
    assert lines[2].startswith("raised: logits must be float32, bfloat16 or float16"), lines
