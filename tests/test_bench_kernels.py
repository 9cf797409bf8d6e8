"""Kernel families of the latency bench: names sorted into families, per-step figures."""

from __future__ import annotations

import pytest

from vgraph.bench.kernels import (
    idle_gaps,
    kernel_family,
    short_name,
    summarize_kernels,
    wall_times,
)


@pytest.mark.parametrize(
    "name, family",
    [
        ("void vgraph::paged_attention_kernel<__nv_bfloat16, 64>(...)", "attention"),
        ("void vgraph::reshape_and_cache_kernel<float>(...)", "kv_cache_write"),
        ("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", "matmul"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64", "matmul"),
        ("void vgraph::fused_add_rms_norm_kernel<c10::BFloat16>(...)", "norm"),
        ("void vgraph::rotary_embedding_kernel<c10::BFloat16>(...)", "rotary"),
        ("void vgraph::embedding_kernel<c10::BFloat16, long, 8>(...)", "embedding"),
        ("void vgraph::silu_and_mul_kernel<c10::BFloat16>(...)", "activation"),
        ("void at::native::reduce_kernel<512, 1, ArgMaxOps>(...)", "sampling"),
        (
            "vgraph::(anonymous namespace)::argmax_rows_kernel(long*, float const*, long)",
            "sampling",
        ),
        ("void vgraph::gemv::gemv_kernel<c10::BFloat16, 1, (Epilogue)2>(...)", "fused_decode"),
        ("void vgraph::gemv::gemv_mma_kernel<c10::BFloat16, 2, (Epilogue)1>(...)", "fused_decode"),
        ("void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add>(...)", "elementwise"),
        ("triton_poi_fused_add_mul_0", "triton"),
        ("some_new_kernel<int>(int)", "some_new_kernel"),
    ],
)
def test_kernel_family(name, family):
    assert kernel_family(name) == family


def test_summary_per_step():
    kernels = [("gemv2T_kernel", 3.0), ("paged_attention_kernel", 5.0), ("gemv2T_kernel", 1.0)] * 2
    s = summarize_kernels(kernels, num_steps=2)
    assert s["kernels_per_step"] == 3 and s["gpu_us_per_step"] == 9.0
    assert s["families"]["attention"] == {"kernels": 1.0, "us": 5.0}
    assert list(s["families"]) == ["attention", "matmul"]  # largest GPU time first
    assert s["top"][0] == {"name": "paged_attention_kernel", "kernels": 1.0, "us": 5.0}


def test_wall_times_charge_each_kernel_what_it_adds() -> None:
    # b starts while a runs (PDL) and ends after it; c runs alone after a gap; d inside c
    spans = [(0.0, 4.0), (1.0, 6.0), (8.0, 10.0), (8.5, 9.0)]
    assert wall_times(spans) == [4.0, 2.0, 2.0, 0.0]
    assert wall_times(list(reversed(spans))) == [0.0, 2.0, 2.0, 4.0]


def test_summary_with_spans_splits_the_busy_time_by_family() -> None:
    kernels = [("paged_attention_kernel", 5.0), ("nvjet_gemm", 4.0)]
    s = summarize_kernels(kernels, num_steps=1, spans=[(0.0, 5.0), (2.0, 6.0)])
    assert s["busy_us_per_step"] == 6.0
    assert s["families"]["attention"]["wall_us"] == 5.0
    assert s["families"]["matmul"] == {"kernels": 1.0, "us": 4.0, "wall_us": 1.0}


def test_short_name_drops_arguments_and_keeps_template_arguments() -> None:
    name = (
        "void vgraph::gemv::gemv_kernel<c10::BFloat16, 1, (vgraph::gemv::Epilogue)3>"
        "(vgraph::gemv::GemvArgs<c10::BFloat16>)"
    )
    kept = "vgraph::gemv::gemv_kernel<c10::BFloat16, 1, (vgraph::gemv::Epilogue)3>"
    assert short_name(name) == kept
    assert short_name("nvjet_hsh_64x8_v_bz_splitK_TNT") == "nvjet_hsh_64x8_v_bz_splitK_TNT"
    attention = "void vgraph::(anonymous namespace)::paged_attention_kernel<float, 64, 1>(Params)"
    assert short_name(attention) == "vgraph::{anonymous}::paged_attention_kernel<float, 64, 1>"


def test_summary_lists_the_first_step_in_start_order_with_walls() -> None:
    # two steps of two kernels; the second kernel of each starts under the first (PDL)
    kernels = [("b_kernel(int)", 3.0), ("a_kernel(int)", 4.0)] * 2
    spans = [(2.0, 5.0), (0.0, 4.0), (12.0, 15.0), (10.0, 14.0)]
    s = summarize_kernels(kernels, num_steps=2, spans=spans)
    assert s["sequence"] == [
        {"name": "a_kernel", "us": 4.0, "wall_us": 4.0},
        {"name": "b_kernel", "us": 3.0, "wall_us": 1.0},
    ]
    walls = {e["name"]: e["wall_us"] for e in s["top"]}
    assert walls == {"a_kernel(int)": 4.0, "b_kernel(int)": 1.0}


def test_idle_gaps_find_where_the_gpu_waited() -> None:
    # two steps: a and b overlap (PDL), a copy, then c after a 3 us gap; the second step's a
    # starts 5 us after c ends; d runs inside c (no gap)
    activity = [
        ("void k::a<int>(int)", 0.0, 4.0),
        ("b", 1.0, 6.0),
        ("Memcpy HtoD", 6.5, 7.0),
        ("c", 10.0, 12.0),
        ("d", 10.5, 11.0),
        ("void k::a<int>(int)", 17.0, 20.0),
    ]
    g = idle_gaps(list(reversed(activity)), num_steps=2, top=2)
    assert g["span_us_per_step"] == 10.0 and g["idle_us_per_step"] == 4.25  # (0.5 + 3 + 5) / 2
    assert g["longest_gaps"] == [
        {"us": 5.0, "after": "c", "before": "k::a<int>"},
        {"us": 3.0, "after": "Memcpy HtoD", "before": "c"},
    ]
    assert idle_gaps([], 1)["longest_gaps"] == []
