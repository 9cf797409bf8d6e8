"""Llama-family decoder (Llama 2/3.x, SmolLM2) in plain PyTorch over flattened tokens.

Inputs are [num_tokens] ids and positions of every request in the step, concatenated; attention
metadata comes from the ForwardContext. Qwen2 (qkv bias) and Qwen3 (per-head q/k RMSNorm) are the
same graph with two switches, set by their subclasses.

On CUDA with a CUDA build of vgraph._C that has the fused decode ops, every layer is three fused
ops around attention, and the residual stream is one tensor that the O and down projections add
into in place (the values of fused_add_rms_norm, one launch fewer per add):
  rms_norm_qkv_rope -> attention -> linear_add_residual (O) -> rms_norm_mlp_residual (the MLP:
  rms_norm_gate_up_silu, then linear_add_residual for the down projection, or one kernel); after
  the last layer the model returns the residual stream and the final RMSNorm is the prologue of
  the LM head, rms_norm_linear_out writing the logits in the model's dtype (the sampler widens
  them to float32 where it needs them) and each row's greedy token. Each op runs GEMV kernels for
  small token counts and cuBLAS above (decided inside the op, so one traced graph serves every
  size). The KV-cache write stays with the attention layer (the cache is no tensor of the traced
  model); the csrc backend does it in its attention launch.
  Elsewhere (the CPU) the torch code below, the oracle compared with transformers.
On the fused path of a model without q / k norms (Llama, SmolLM2) each layer's input norm weight
is folded into its QKV weight when the model loads (process_weights_after_loading;
VGRAPH_FOLD_QKV_NORM), and the QKV op knows its norm weight is ones. On an sm_90 GPU the QKV and
gate/up weights that the wide tensor-core GEMV runs are also packed for it, tile by tile
(VGRAPH_WIDE_PACK), and passed to their ops beside the row-major ones. Where the MLP op's table
runs the whole MLP as one kernel (Llama-3.2-1B at one token), the model gives it its scratch.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from vgraph._ext import use_cuda_op
from vgraph.distributed.parallel_state import get_tp
from vgraph.layers.attention import Attention
from vgraph.layers.layernorm import RMSNorm
from vgraph.layers.linear import (
    SiluAndMul,
    gate_up_linear,
    num_kv_heads_per_rank,
    qkv_linear,
    row_parallel_linear,
)
from vgraph.layers.rotary import RotaryEmbedding, rope_parameters
from vgraph.layers.vocab_parallel_embedding import (
    ParallelLMHead,
    VocabParallelEmbedding,
    vocab_parallel_logits,
)

# The fused head ops' greedy_state size (csrc/decode_common.h: kGreedyStateSize): a pair a row.
GREEDY_STATE_SIZE = 128
# The input norms' weights folded into the QKV weights at load (process_weights_after_loading):
# 1, 0, or auto (the default: on the fused path of a model without q / k norms).
FOLD_QKV_NORM_ENV = "VGRAPH_FOLD_QKV_NORM"
# The QKV and gate/up weights also packed for the wide tensor-core GEMV at load
# (process_weights_after_loading): 1, 0, or auto (the default: those it runs).
WIDE_PACK_ENV = "VGRAPH_WIDE_PACK"

# checkpoint name fragment -> (our fused parameter fragment, shard id)
STACKED_PARAMS = {
    ".q_proj.": (".qkv_proj.", "q"),
    ".k_proj.": (".qkv_proj.", "k"),
    ".v_proj.": (".qkv_proj.", "v"),
    ".gate_proj.": (".gate_up_proj.", 0),
    ".up_proj.": (".gate_up_proj.", 1),
}


class LlamaAttention(nn.Module):
    def __init__(
        self, cfg: dict[str, Any], prefix: str, bias: bool, qk_norm: bool, rope: RotaryEmbedding
    ) -> None:
        super().__init__()
        hidden = cfg["hidden_size"]
        total_heads = cfg["num_attention_heads"]
        total_kv_heads = cfg.get("num_key_value_heads") or total_heads
        self.head_dim = cfg.get("head_dim") or hidden // total_heads
        # this rank's heads (all of them at tp=1)
        self.num_heads = total_heads // get_tp().world_size
        self.num_kv_heads = num_kv_heads_per_rank(total_kv_heads)
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.qkv_proj = qkv_linear(hidden, total_heads, total_kv_heads, self.head_dim, bias)
        self.o_proj = row_parallel_linear(total_heads * self.head_dim, hidden)
        self.qk_norm = qk_norm
        if qk_norm:
            eps = cfg.get("rms_norm_eps", 1e-6)
            self.q_norm = RMSNorm(self.head_dim, eps)
            self.k_norm = RMSNorm(self.head_dim, eps)
        self.rotary_emb = rope  # one table shared by every layer
        # Whether qkv_proj's weight carries the input norm's weight, the norm's being ones
        # (LlamaForCausalLM.process_weights_after_loading): the fused op's unit_norm.
        self.unit_norm = False
        # qkv_proj's weight packed for the wide GEMV (pack_wide_weight), or None.
        self.wide_packed: torch.Tensor | None = None
        self.attn = Attention(
            self.num_heads, self.head_dim, self.head_dim**-0.5, self.num_kv_heads, f"{prefix}.attn"
        )

    def forward(self, positions: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        # positions: [T]; hidden: [T, hidden_size]
        qkv = self.qkv_proj(hidden)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        if self.qk_norm:
            t = q.shape[0]
            q = self.q_norm(q.reshape(t, -1, self.head_dim)).view(t, self.q_size)
            k = self.k_norm(k.reshape(t, -1, self.head_dim)).view(t, self.kv_size)
        q, k = self.rotary_emb(positions, q, k)
        return self.o_proj(self.attn(q, k, v.contiguous()))

    def forward_fused(self, positions: torch.Tensor, residual: torch.Tensor, norm: RMSNorm) -> None:
        """residual += o_proj(attn(rope(qkv_proj(norm(residual))))), in place.
        positions: [T]; residual: [T, hidden_size]."""
        t = residual.shape[0]
        qkv = torch.empty(  # [T, q_size + 2 * kv_size]
            t, self.q_size + 2 * self.kv_size, dtype=residual.dtype, device=residual.device
        )
        rope = not self.qk_norm  # Qwen3 normalizes each head before RoPE: separate ops there
        torch.ops.vgraph_C.rms_norm_qkv_rope(
            qkv,
            residual,
            norm.weight,
            norm.eps,
            self.qkv_proj.weight,
            self.qkv_proj.bias,
            positions if rope else None,
            self.rotary_emb.cos_sin_cache if rope else None,
            self.head_dim,
            self.num_heads,
            self.num_kv_heads,
            unit_norm=self.unit_norm,
            wide_packed=self.wide_packed,
        )
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        if self.qk_norm:
            q = self.q_norm(q.reshape(t, -1, self.head_dim)).view(t, self.q_size)
            k = self.k_norm(k.reshape(t, -1, self.head_dim)).view(t, self.kv_size)
            q, k = self.rotary_emb(positions, q, k)
        out = self.attn(q, k, v)  # [T, q_size]; the cache write takes strided K/V rows
        torch.ops.vgraph_C.linear_add_residual(residual, out, self.o_proj.weight)


class LlamaMLP(nn.Module):
    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act={cfg['hidden_act']!r} is not supported; use 'silu'")
        self.gate_up_proj = gate_up_linear(cfg["hidden_size"], cfg["intermediate_size"])
        self.down_proj = row_parallel_linear(cfg["intermediate_size"], cfg["hidden_size"])
        self.act_fn = SiluAndMul()
        self.wide_packed: torch.Tensor | None = None  # gate_up_proj's, packed (as attention's)
        # The one-kernel MLP's scratch, shared by the model's layers (LlamaForCausalLM sets it
        # where the op's table runs it), or None: the gate/up and down ops at every token count.
        self.mlp_state: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [T, hidden] -> [T, hidden]
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))

    def forward_fused(self, residual: torch.Tensor, norm: RMSNorm) -> None:
        """residual += down(silu_and_mul(gate_up(norm(residual)))), in place; [T, hidden]: the
        gate/up and down ops, or at the token counts its table gives (with mlp_state) one kernel."""
        torch.ops.vgraph_C.rms_norm_mlp_residual(
            residual,
            norm.weight,
            norm.eps,
            self.gate_up_proj.weight,
            self.down_proj.weight,
            state=self.mlp_state,
            wide_packed=self.wide_packed,
        )


class LlamaDecoderLayer(nn.Module):
    def __init__(
        self, cfg: dict[str, Any], prefix: str, bias: bool, qk_norm: bool, rope: RotaryEmbedding
    ) -> None:
        super().__init__()
        eps = cfg.get("rms_norm_eps", 1e-6)
        self.self_attn = LlamaAttention(cfg, f"{prefix}.self_attn", bias, qk_norm, rope)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = RMSNorm(cfg["hidden_size"], eps)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], eps)

    def forward(
        self, positions: torch.Tensor, hidden: torch.Tensor, residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            residual = hidden
            hidden = self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(positions, hidden)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden), residual

    def forward_fused(self, positions: torch.Tensor, residual: torch.Tensor) -> None:
        """One layer on the residual stream [T, hidden_size], in place."""
        self.self_attn.forward_fused(positions, residual, self.input_layernorm)
        self.mlp.forward_fused(residual, self.post_attention_layernorm)


class LlamaModel(nn.Module):
    def __init__(self, cfg: dict[str, Any], bias: bool, qk_norm: bool) -> None:
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(cfg["vocab_size"], cfg["hidden_size"])
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        theta, scaling = rope_parameters(cfg)
        rope = RotaryEmbedding(head_dim, cfg.get("max_position_embeddings", 2048), theta, scaling)
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(cfg, f"model.layers.{i}", bias, qk_norm, rope)
            for i in range(cfg["num_hidden_layers"])
        )
        self.norm = RMSNorm(cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-6))
        self.fused: bool | None = None  # fused decode ops or torch code; decided at the first call
        self.norm_in_head = False  # on the fused path: from final_norm_in_head at the first call

    # On the fused path, the final norm as the LM head's prologue (rms_norm_linear_out); off: its
    # own kernel before linear_out (for comparisons).
    final_norm_in_head = True

    def use_fused_ops(self, x: torch.Tensor) -> bool:
        """The fused decode ops: on CUDA with a build that has them (the CPU keeps the torch code),
        for the layouts they cover (no bias on the O / gate-up / down projections), and only at
        tp=1: the ops add whole-weight projections into the residual, with no all-reduce."""
        return (
            get_tp().world_size == 1
            and use_cuda_op(x, "rms_norm_qkv_rope")
            and x.dtype == self.norm.weight.dtype
            and all(
                layer.self_attn.o_proj.bias is None
                and layer.mlp.gate_up_proj.bias is None
                and layer.mlp.down_proj.bias is None
                for layer in self.layers
            )
        )

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        hidden = self.embed_tokens(input_ids)  # [T, hidden]
        if self.fused is None:
            self.fused = self.use_fused_ops(hidden)
            self.norm_in_head = self.fused and self.final_norm_in_head
        if self.fused:
            residual = hidden  # the residual stream: every layer adds into it in place
            for layer in self.layers:
                layer.forward_fused(positions, residual)
            if self.norm_in_head:
                return residual  # the final norm is the LM head's prologue (compute_logits)
            return self.norm(residual)
        residual = None
        for layer in self.layers:
            hidden, residual = layer(positions, hidden, residual)
        hidden, _ = self.norm(hidden, residual)
        return hidden


class LlamaForCausalLM(nn.Module):
    attention_bias = False
    qk_norm = False
    # On the fused path, the greedy tokens from the LM head op (compute_logits_and_greedy); off:
    # the sampler's own argmax launch after the head (for comparisons).
    greedy_in_head = True
    # On the fused path, the head writes the logits in the model's dtype, vLLM's contract: the
    # values are the same as float32 ones (the head rounds them to the dtype first), a greedy step
    # never widens them and the sampler works in float32 where it needs to (Sampler). On: float32
    # logits from the head (for comparisons).
    float32_logits = False

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        self.config = cfg
        bias = cfg.get("attention_bias", self.attention_bias)
        self.model = LlamaModel(cfg, bias, self.qk_norm)
        self.tie_word_embeddings = cfg.get("tie_word_embeddings", False)
        if not self.tie_word_embeddings:
            self.lm_head = ParallelLMHead(cfg["vocab_size"], cfg["hidden_size"])
        self.greedy_state: torch.Tensor | None = None  # the fused head's (_greedy_state)

    @torch.no_grad()
    def process_weights_after_loading(self) -> None:
        """Called by load_model once the weights are in. With the fold (VGRAPH_FOLD_QKV_NORM) each
        layer's input norm weight is multiplied into its QKV weight (each rank's rows take the
        whole, replicated norm weight) and set to ones: the same function, rounded once more in
        the weight. The fused QKV op then takes unit_norm, and where it runs cuBLAS (above its
        GEMV token threshold) one kernel scales the GEMM's rows by 1 / rms and applies RoPE after
        it, in place of a norm kernel before it and a RoPE kernel after. auto (the default) folds
        on the fused path of a model without q / k norms: Llama-3.2-1B's batch-16 step took
        1.340 against 1.366 ms, Qwen3-0.6B's (q / k norms, no RoPE in its QKV op) 1.500
        against 1.454 (H100, 2026-12-05, benchmarks/results/2026-12-05-h200-fold-argmax/). An
        environment switch, so that an engine core in its own process reads it too."""
        value = os.environ.get(FOLD_QKV_NORM_ENV, "auto")
        if value not in ("0", "1", "auto"):
            raise ValueError(f"{FOLD_QKV_NORM_ENV} must be 0, 1 or auto, got {value!r}")
        probe = self.model.embed_tokens.weight[:1]  # forward's first activations' kind
        fused = self.model.use_fused_ops(probe)
        if value == "auto":
            value = "1" if not self.qk_norm and fused else "0"
        if value == "1":
            for layer in self.model.layers:
                norm, attn = layer.input_layernorm, layer.self_attn
                weight = attn.qkv_proj.weight  # [N, hidden]
                weight.copy_(weight.float() * norm.weight.float())
                norm.weight.fill_(1.0)
                attn.unit_norm = True
        self._pack_wide_weights(probe if fused else None)
        self._prepare_one_kernel_mlp(probe if fused else None)

    def _pack_wide_weights(self, fused_probe: torch.Tensor | None) -> None:
        """On the fused path of an sm_90 GPU, each layer's QKV and gate/up weights packed for the
        wide tensor-core GEMV (pack_wide_weight), beside the row-major ones the other paths read:
        a warp's chunk of 16 rows is then one contiguous 2 KiB run, where the row-major weight
        gives 16 runs of 128 bytes. VGRAPH_WIDE_PACK: auto (the default) packs the weights whose
        shape the per-shape table runs on the wide kernel (wide_gemv_from; Llama-3.2-1B's and
        Qwen3-0.6B's, not SmolLM2-135M's), 1 every QKV and gate/up weight (for comparisons with
        VGRAPH_GEMV=wide), 0 none. On an H200 Llama-3.2-1B's batch-16 step took 1.038 against
        1.066 ms in the engine loop, its batch 1 0.809 against 0.813, for 1.27 GB more weights
        (benchmarks/results/2026-12-05-h200-wide-pack/). fused_probe: a tensor on the model's
        device where the model runs the fused ops, else None."""
        value = os.environ.get(WIDE_PACK_ENV, "auto")
        if value not in ("0", "1", "auto"):
            raise ValueError(f"{WIDE_PACK_ENV} must be 0, 1 or auto, got {value!r}")
        if value == "0" or fused_probe is None or not fused_probe.is_cuda:
            return
        if torch.cuda.get_device_capability(fused_probe.device)[0] < 9:
            return
        ops = torch.ops.vgraph_C

        def packed(weight: torch.Tensor, epilogue: str, head_size: int = 0) -> torch.Tensor | None:
            if value == "auto" and ops.wide_gemv_from(weight, epilogue, head_size) == 0:
                return None
            return ops.pack_wide_weight(weight, epilogue, head_size)

        for layer in self.model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            attn.wide_packed = packed(attn.qkv_proj.weight, "qkv", attn.head_dim)
            mlp.wide_packed = packed(mlp.gate_up_proj.weight, "gate_up")

    def _prepare_one_kernel_mlp(self, fused_probe: torch.Tensor | None) -> None:
        """On the fused path of a GPU, for the gate/up shapes whose MLP the op's table runs as one
        kernel at one token (fused_mlp_tokens: Llama-3.2-1B's; VGRAPH_FUSED_MLP_TOKENS=0 / 1 for
        every shape the kernel takes, for comparisons), the kernel's zeroed scratch, one for every
        layer (rms_norm_mlp_residual's state)."""
        if fused_probe is None or not fused_probe.is_cuda:
            return
        state = None
        for layer in self.model.layers:
            mlp = layer.mlp
            if torch.ops.vgraph_C.fused_mlp_tokens(mlp.gate_up_proj.weight) == 0:
                continue
            if state is None:
                words = (mlp.down_proj.weight.shape[1] + 3) // 4 + 2  # csrc/decode_mlp.cu
                state = torch.zeros(words, dtype=torch.int64, device=fused_probe.device)
            mlp.mlp_state = state

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """input_ids, positions: [T] -> hidden states [T, hidden_size], for compute_logits (on the
        fused path the residual stream before the final norm, which compute_logits applies)."""
        return self.model(input_ids, positions)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [R, hidden_size] rows of forward's output -> logits [R, vocab_size]: float32,
        or on the fused path the model's dtype (float32_logits)."""
        return self.compute_logits_and_greedy(hidden, greedy=False)[0]

    def compute_logits_and_greedy(
        self, hidden: torch.Tensor, greedy: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """compute_logits, and on the fused path each row's greedy token [R] int64 (the argmax of
        its logits) from the head op itself (the looping one-token GEMV's epilogue, an argmax
        kernel after other GEMVs and after cuBLAS), so a FULL graph ends with the greedy tokens
        and the sampler launches no argmax. None where the head is torch code (and with
        greedy_in_head off)."""
        head = self.model.embed_tokens if self.tie_word_embeddings else self.lm_head
        weight = head.weight
        if not self.model.fused:
            return vocab_parallel_logits(hidden, head), None
        # final norm + LM head in one op (logits rounded to the dtype first)
        rows = hidden.shape[0]
        dtype = torch.float32 if self.float32_logits else hidden.dtype
        logits = torch.empty(rows, weight.shape[0], dtype=dtype, device=hidden.device)
        state = self._greedy_state(hidden.device)  # made at the first call (the memory profile)
        ids = None
        if greedy and self.greedy_in_head:
            ids = torch.empty(rows, dtype=torch.int64, device=hidden.device)
        greedy_args = {"greedy": ids, "greedy_state": None if ids is None else state}
        if self.model.norm_in_head:
            norm = self.model.norm
            torch.ops.vgraph_C.rms_norm_linear_out(
                logits, hidden, norm.weight, norm.eps, weight, **greedy_args
            )
        else:
            torch.ops.vgraph_C.linear_out(logits, hidden, weight, **greedy_args)
        return logits, ids

    def _greedy_state(self, device: torch.device) -> torch.Tensor:
        """The head op's scratch for its greedy tokens: zeroed once, at the first fused head call
        (the memory profile's, eager, before any capture), and left zeroed by every call."""
        if self.greedy_state is None or self.greedy_state.device != device:
            self.greedy_state = torch.zeros(GREEDY_STATE_SIZE, dtype=torch.int64, device=device)
        return self.greedy_state

    def checkpoint_name_map(self, name: str) -> tuple[str, object] | None:
        """Map a checkpoint tensor name to (our parameter name, shard id); None to skip it."""
        if "rotary_emb.inv_freq" in name:
            return None
        if self.tie_word_embeddings and name == "lm_head.weight":
            return None
        for frag, (fused, shard) in STACKED_PARAMS.items():
            if frag in name:
                return name.replace(frag, fused), shard
        return name, None
