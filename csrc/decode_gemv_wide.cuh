// The wide tensor-core GEMV of the fused decode ops (declared in decode_gemv.h): mma.sync m16n8k16
// like decode_gemv_mma.cuh, with the same tiles, lane layout, prologues and epilogues, but shaped
// for matrices that stream from HBM for longer than a kernel's fixed cost (8-64 MiB).
//
// Why a second kernel. In the tensor-core kernel a CTA owns one 16-row tile and its warps split K,
// so every CTA reads the whole [M, K] activations and normalizes them again (the norm ops): at 16
// tokens that is as many bytes as its weights, and a normalized value per weight per token on the
// CUDA cores. Llama-3.2-1B's gate/up took 38 us at 16 tokens there against cuBLAS's 24.
//
// Tiling. A CTA has W warps (kWideMaxWarps at most); warp w owns the 16-row tile blockIdx.y * W + w
// (mma_row: the same rows as the tensor-core kernel's tile) over the CTA's range of K. A launch may
// split K over S CTAs (grid (S, tiles / W), one thread-block cluster of (S, 1, 1) per W tiles):
// CTA rank r takes K range [r K / S, (r + 1) K / S), its warps' partial tiles meet through
// distributed shared memory, and the cluster's CTAs share the epilogue.
//
// Order of work (D: the ring's stages, kWideStages or deeper: launch_wide_nt). Before
// `griddepcontrol.wait`: each warp's first D - 1 weight chunks,
// by cp.async into the warp's ring in shared memory (the weights stream while the previous kernel
// finishes; a ring in registers held too few bytes in flight), the norm weight of the CTA's K range
// (cp.async) and the epilogue's step constants (bias, cos / sin). After it: the CTA's activations,
// once, by cp.async into shared memory (rows padded by 64 bytes, so the fragment loads below hit 32
// distinct banks per quarter warp), and the residual values the epilogue adds (with
// GemvArgs::wide_early_refill, chunk D - 1 into the ring's free stage first). Each warp's loop
// refills its ring D - 1 chunks ahead, waits for the chunk it takes and runs the chunk's
// mma steps on the staged activations. Only after the loop (`griddepcontrol.launch_dependents`)
// may the next kernel's CTAs start: let in at once, they took SM slots and HBM bandwidth from the
// loop, and Llama-3.2-1B's decode step with gate/up on this kernel was 1-75 us slower at 2-16
// tokens (2026-12-03-h200-wide, call 6). The launcher may move the point into the loop's last
// chunks (GemvArgs::wide_trigger_left: the op's per-shape table in decode_cuda.cu).
//
// The norm ops. RMSNorm's 1 / rms needs every activation of the token, so normalizing before the
// first mma step kept each CTA's weights waiting for a pass over its activations, a block-wide
// reduction (and a cluster's) and a second pass: Llama-3.2-1B's gate/up call at 16 tokens took
// 22.4 us, and 18.1 in a probe that skipped its staging and norm (results wrong;
// benchmarks/results/2026-12-03-h200-wide, call 3). Here the mma steps take
// norm_weight * x, rounded once to the dtype (a packed multiply on the fragment), the sums of
// squares are taken after the loop, and the epilogue scales each token's sums by its 1 / rms in
// float32 (a cluster adds its CTAs' sums of squares through distributed shared memory).
//
// Numerics: the ops without a norm round as the tensor-core kernel does, summing in another fp32
// order (a warp over all of the CTA's K, then the cluster's CTAs in rank order). The norm ops round
// once where RMSNorm rounds twice (x * inv_rms, then the weight's product): within the tolerance of
// the float32 reference, not bit-near the unfused path.
#pragma once

#include <cooperative_groups.h>

namespace vgraph {
namespace gemv {

constexpr int kWideMaxWarps = 8;  // tiles per CTA
constexpr int kWideStages = 8;    // a warp's weight ring: chunks; kWideStages - 1 in flight at once
// Deeper rings where shared memory allows (wide_stages): 11 stages at up to 8 tokens, 9 at 9-16,
// for Llama-3.2-1B's gate/up (K = 2,048, unsplit), 10 and 8 chunks in flight a warp.
constexpr int kWideDeepStages1 = 11, kWideDeepStages2 = 9;
constexpr int kWideStageVecs = 2 * kMmaVecs * 32;  // 16-byte vectors of a stage: 2 rows, 32 lanes
constexpr int kWideMaxSplit = 8;  // CTAs of a cluster: the portable cluster size
constexpr int kWidePad = 32;      // elements after each staged activation row (64 bytes)
constexpr int kWideSmemMax = 220 * 1024;  // dynamic shared memory a launch may use

// Grid (S, blocks); cluster (S, 1, 1) when S > 1. NT: 8-token column tiles (1, 2 or 4). D: the
// ring's stages.
template <typename T, int NT, Epilogue E, int D>
__global__ void __launch_bounds__(kWideMaxWarps * 32) gemv_wide_kernel(const GemvArgs<T> a) {
  constexpr bool kNorm = has_norm(E);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = blockDim.x / 32;
  const int g = lane / 4, q = lane % 4;
  const int S = gridDim.x, rank = blockIdx.x;
  const int m_count = a.num_tokens;  // at most NT * 8
  const int kc = a.K / S, k0 = rank * kc, num_chunks = kc / kMmaK, row_len = kc + kWidePad;
  const int num_tiles = mma_tiles<T, E>(a);

  extern __shared__ __align__(16) unsigned char smem[];
  T* s_x = reinterpret_cast<T*>(smem);                  // [NT * 8][row_len]: the activations
  T* s_nw = s_x + NT * 8 * row_len;                     // [kc]: the norm weight (norm ops)
  uint4* s_w = reinterpret_cast<uint4*>(s_nw + (kNorm ? kc : 0));  // [W][D][kWideStageVecs]
  float* s_red = reinterpret_cast<float*>(s_w + num_warps * D * kWideStageVecs);  // (S > 1)
  // [W][NT * 4][32]
  __shared__ float s_sq[NT * 8];                         // the CTA's sums of squares per token
  __shared__ float s_inv_rms[NT * 8];

  // 1. This warp's tile: its lane's rows g and g + 8, weights from k0 on.
  const int tile = blockIdx.y * num_warps + warp;
  const bool has_tile = tile < num_tiles;
  const int row0 = mma_row<T, E>(a, has_tile ? tile : 0, g);
  const int row1 = mma_row<T, E>(a, has_tile ? tile : 0, g + 8);
  const bool valid0 = has_tile && row0 < a.N, valid1 = has_tile && row1 < a.N;
  const uint4* w0 =
      reinterpret_cast<const uint4*>(a.weight + static_cast<int64_t>(valid0 ? row0 : 0) * a.K +
                                     k0) + q;
  const uint4* w1 =
      reinterpret_cast<const uint4*>(a.weight + static_cast<int64_t>(valid1 ? row1 : 0) * a.K +
                                     k0) + q;
  const int my_chunks = has_tile ? num_chunks : 0;
  // Packed (GemvArgs::wide_packed): the tile's chunks lie one after another, each as a stage.
  const uint4* packed =
      a.wide_packed == nullptr
          ? nullptr
          : reinterpret_cast<const uint4*>(a.wide_packed) +
                (static_cast<int64_t>(has_tile ? tile : 0) * (a.K / kMmaK) + rank * num_chunks) *
                    kWideStageVecs + lane;

  // The units of the epilogue this warp writes: unit u is (tile-local warp u / NT, column tile
  // u % NT). Without a split each warp writes its own tile's; with one, CTA `rank` takes the
  // units u = rank + S * j, its warp w those of j = w, w + W, ...
  auto unit = [&](int i) -> int {
    const int u = S == 1 ? warp * NT + i : rank + S * (warp + num_warps * i);
    return (S == 1 ? i < NT : u < num_warps * NT) ? u : -1;
  };
  auto unit_tile = [&](int u) { return blockIdx.y * num_warps + u / NT; };

  // 2. Before the wait: the first D - 1 chunks, the norm weight, the epilogue's step constants.
  // Chunk j goes to stage j % D of the warp's ring by cp.async, one commit group per chunk (empty
  // past the end, so the group count stays uniform); each lane copies and later reads only its own
  // vectors ([stage][row half][v][lane]), so its own cp.async wait is all the ordering it needs.
  uint4* ring = s_w + warp * D * kWideStageVecs;
  const uint64_t policy = weight_policy(a.l2_evict_first);
  auto issue = [&](int j) {
    if (j < my_chunks) {
      uint4* st = ring + (j % D) * kWideStageVecs;
      if (packed != nullptr) {
        const uint4* src = packed + static_cast<int64_t>(j) * kWideStageVecs;
#pragma unroll
        for (int v = 0; v < 2 * kMmaVecs; ++v) {
          cp_async16_hint(st + v * 32 + lane, src + v * 32, policy);
        }
      } else {
        const int c = j * (kMmaK / 8);  // in 16-byte vectors
#pragma unroll
        for (int v = 0; v < kMmaVecs; ++v) {
          cp_async16_hint(st + v * 32 + lane, w0 + c + 4 * v, policy);
          cp_async16_hint(st + (kMmaVecs + v) * 32 + lane, w1 + c + 4 * v, policy);
        }
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < D - 1; ++s) issue(s);
  if constexpr (kNorm) {
    for (int i = threadIdx.x; i < kc / 8; i += blockDim.x) {
      cp_async16(s_nw + i * 8, a.norm_weight + k0 + i * 8);
    }
    cp_async_commit();
  }
  EpiIn in[NT][2];
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    const int u = unit(i);
    if (u < 0 || unit_tile(u) >= num_tiles) continue;
    const int r0 = mma_row<T, E>(a, unit_tile(u), g), r1 = mma_row<T, E>(a, unit_tile(u), g + 8);
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const int m = (u % NT) * 8 + 2 * q + t;
      if (m < m_count) epi_before_wait<T, E>(a, m, r0, r1, in[i][t]);
    }
  }
  if (a.wide_trigger_left < 0) pdl::launch_dependents();
  pdl::wait();  // everything below may read what the previous kernel wrote

  // 3. The activations of the CTA's K range, staged once; the residual values of the units.
  for (int i = threadIdx.x; i < m_count * (kc / 8); i += blockDim.x) {
    const int m = i / (kc / 8), v = i - m * (kc / 8);
    cp_async16(s_x + m * row_len + v * 8, a.x + m * a.x_stride + k0 + v * 8);
  }
  cp_async_commit();
  if constexpr (E == Epilogue::kAddResidual) {
#pragma unroll
    for (int i = 0; i < NT; ++i) {
      const int u = unit(i);
      if (u < 0 || unit_tile(u) >= num_tiles) continue;
      const int r0 = mma_row<T, E>(a, unit_tile(u), g), r1 = mma_row<T, E>(a, unit_tile(u), g + 8);
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const int m = (u % NT) * 8 + 2 * q + t;
        if (m < m_count) epi_after_wait<T, E>(a, m, r0, r1, r0 < a.N, r1 < a.N, in[i][t]);
      }
    }
  }
  // With wide_early_refill the ring's free stage takes chunk D - 1 now, so that it streams while
  // the activations arrive (the chunks issued before the wait have often landed by then: the warp
  // would have no weight load in flight until its loop's first refill); the loop's first
  // iteration then issues nothing. The wait leaves only that chunk's group pending: the groups
  // complete in commit order, the activations' (and the norm weight's) were committed before it.
  if (a.wide_early_refill) {
    issue(D - 1);
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();

  // 4. The warp's chunks. Iteration j first refills the stage chunk j - 1 used (its values fed
  // the previous iteration's mma steps, so they were read), then waits for chunk j: at least
  // D - 1 groups were committed after it (more in the first iterations, where the norm weight's
  // and the activations' groups lie between; the wait above saw those chunks complete). The norm
  // ops feed the mma steps norm_weight * x, rounded once (a packed multiply); each token's 1 / rms
  // scales its sums in the epilogue.
  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
  // The next kernel may start once this warp has wide_trigger_left chunks left (at the top of that
  // iteration; 0 or no chunks: after the loop).
  const int trigger_j = a.wide_trigger_left < 0 ? -1 : max(my_chunks - a.wide_trigger_left, 0);
  for (int j = 0; j < my_chunks; ++j) {
    if (j == trigger_j) pdl::launch_dependents();
    if (j > 0 || !a.wide_early_refill) issue(j + D - 1);
    cp_async_wait<D - 1>();
    const uint4* st = ring + (j % D) * kWideStageVecs;
    uint4 A0[kMmaVecs], A1[kMmaVecs], nw[kMmaVecs];
#pragma unroll
    for (int v = 0; v < kMmaVecs; ++v) {
      A0[v] = st[v * 32 + lane], A1[v] = st[(kMmaVecs + v) * 32 + lane];
      if constexpr (kNorm) {
        nw[v] = *reinterpret_cast<const uint4*>(s_nw + j * kMmaK + q * 8 + v * 32);
      }
    }
    const T* xk = s_x + g * row_len + j * kMmaK + q * 8;  // + 32 v: this lane's 16 of K
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      if (nt * 8 >= m_count) break;  // the whole column tile is padding
#pragma unroll
      for (int v = 0; v < kMmaVecs; ++v) {
        // Rows past m_count were never staged: they feed only their own (unwritten) columns.
        uint4 xb = *reinterpret_cast<const uint4*>(xk + nt * 8 * row_len + v * 32);
        if constexpr (kNorm) xb = mul8<T>(xb, nw[v]);
        Mma<T>::run(acc[nt], A0[v].x, A1[v].x, A0[v].y, A1[v].y, xb.x, xb.y);
        Mma<T>::run(acc[nt], A0[v].z, A1[v].z, A0[v].w, A1[v].w, xb.z, xb.w);
      }
    }
  }
  cp_async_wait<0>();  // the ring's trailing (empty) groups
  if (trigger_j == my_chunks) pdl::launch_dependents();

  // 5. The norm ops: each token's sum of squares over the CTA's range (a warp per token), after
  // the loop, so no mma step waits for it.
  if constexpr (kNorm) {
    for (int m = warp; m < m_count; m += num_warps) {
      float sq = 0.f;
      for (int v = lane; v < kc / 8; v += 32) {
        float f[8];
        unpack8<T>(*reinterpret_cast<const uint4*>(s_x + m * row_len + v * 8), f);
#pragma unroll
        for (int e = 0; e < 8; ++e) sq = fmaf(f[e], f[e], sq);
      }
      sq = warp_sum(sq);
      if (lane == 0) s_sq[m] = sq;
    }
  }

  // 6. Epilogue. Accumulator value e of column tile nt: row g (e < 2) or g + 8, token 2 q + e % 2;
  // inv_rms(m): token m's 1 / rms (norm ops).
  auto write_unit = [&](int i, int u, const float (&c)[4], auto inv_rms) {
    const int tl = unit_tile(u), nt = u % NT;
    const int r0 = mma_row<T, E>(a, tl, g), r1 = mma_row<T, E>(a, tl, g + 8);
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const int m = nt * 8 + 2 * q + t;
      if (m >= m_count) continue;
      const float r = kNorm ? inv_rms(m) : 1.f;
      write_pair<T, E>(a, m, r0, r1, r0 < a.N, r1 < a.N, c[t] * r, c[2 + t] * r, in[i][t]);
    }
  };
  if (S == 1) {
    if constexpr (kNorm) {
      __syncthreads();  // s_sq
      if (threadIdx.x < m_count) {
        s_inv_rms[threadIdx.x] = rsqrtf(s_sq[threadIdx.x] / static_cast<float>(a.K) + a.eps);
      }
      __syncthreads();
    }
    if (!has_tile) return;
#pragma unroll
    for (int i = 0; i < NT; ++i) {
      if (i * 8 < m_count) write_unit(i, unit(i), acc[i], [&](int m) { return s_inv_rms[m]; });
    }
    return;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Partial tiles in shared memory ([warp][value][lane]: no bank conflicts), summed in rank order
  // by the CTA that writes the unit, with the cluster's sums of squares.
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s_red[(warp * NT * 4 + nt * 4 + e) * 32 + lane] = acc[nt][e];
  }
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  cluster.sync();  // every CTA's partial tiles and sums of squares are written
  auto cluster_inv_rms = [&](int m) {
    float sum = 0.f;
    for (int r = 0; r < S; ++r) sum += *cluster.map_shared_rank(&s_sq[m], r);
    return rsqrtf(sum / static_cast<float>(a.K) + a.eps);
  };
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    const int u = unit(i);
    if (u < 0 || unit_tile(u) >= num_tiles || (u % NT) * 8 >= m_count) continue;
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    const int base = ((u / NT) * NT * 4 + (u % NT) * 4) * 32 + lane;
    for (int r = 0; r < S; ++r) {
      const float* peer = cluster.map_shared_rank(s_red, r);
#pragma unroll
      for (int e = 0; e < 4; ++e) c[e] += peer[base + e * 32];
    }
    write_unit(i, u, c, cluster_inv_rms);
  }
  cluster.sync();  // the peers' shared memory stays until every CTA has read it
#endif
}


// Dynamic shared memory of a launch of NT column tiles over a K range of kc, W warps, a ring of
// `stages` chunks a warp.
template <typename T, Epilogue E>
size_t wide_smem(int nt, int kc, int warps, int split, int stages) {
  return static_cast<size_t>(nt) * 8 * (kc + kWidePad) * sizeof(T) +
         (has_norm(E) ? static_cast<size_t>(kc) * sizeof(T) : 0) +
         static_cast<size_t>(warps) * stages * kWideStageVecs * 16 +
         (split > 1 ? static_cast<size_t>(warps) * nt * 4 * 32 * sizeof(float) : 0);
}

// The launch shape: W warps (tiles) per CTA and S CTAs per cluster splitting K.
struct WideShape {
  int warps, split;
};

// The rule. S: the smallest split of K (a divisor of its chunks, at most kWideMaxSplit, each CTA
// keeping at least kWideMinChunks chunks a warp) that gives 3.5 warp tiles per SM, or failing that
// the largest; larger while the CTA's shared memory does not fit kWideSmemMax. W: kWideMaxWarps (or
// the tile count). Measured on an H200 at 4-16 tokens (benchmarks/results/2026-12-03-h200-wide,
// call 4), the best of S in {1, 2, 4, 8} x W in {2, 4, 8} per shape: Llama-3.2-1B's gate/up S = 1,
// its QKV 4; Qwen3-0.6B's QKV 2, its gate/up 2 (or 1); W = 8 for each. VGRAPH_WIDE_WARPS and
// VGRAPH_WIDE_SPLIT replace the rule's choices (measurements; read at each launch, so a graph keeps
// what it was captured with): a split that does not divide K's chunks is refused, one whose shared
// memory does not fit makes the kernel decline the call (split 0).
constexpr int kWideMinChunks = 4;
template <typename T, Epilogue E>
WideShape wide_shape(const GemvArgs<T>& a, int nt, int stages = kWideStages) {
  const int tiles = mma_tiles<T, E>(a), chunks = a.K / kMmaK, sms = num_sms();
  int warps = env_int("VGRAPH_WIDE_WARPS", 0, 1, kWideMaxWarps);
  const bool forced_warps = warps > 0;
  if (!forced_warps) warps = kWideMaxWarps;
  auto fits = [&](int s) {
    return chunks % s == 0 && wide_smem<T, E>(nt, a.K / s, warps, s, stages) <= kWideSmemMax;
  };
  int split = env_int("VGRAPH_WIDE_SPLIT", 0, 1, kWideMaxSplit);
  if (split > 0) {
    TORCH_CHECK(chunks % split == 0, "VGRAPH_WIDE_SPLIT=", split, " does not divide the ", chunks,
                " chunks of K = ", a.K);
  } else {
    split = 1;
    for (int s = 1; s <= kWideMaxSplit; ++s) {
      if (chunks % s != 0 || chunks / s < kWideMinChunks) continue;
      split = s;
      if (2 * static_cast<int64_t>(tiles) * s >= 7LL * sms && fits(s)) {
        break;
      }
    }
    for (int s = split + 1; s <= kWideMaxSplit && !fits(split); ++s) {
      if (chunks % s == 0) split = s;
    }
  }
  if (!fits(split)) return {warps, 0};
  if (!forced_warps) warps = std::min(warps, tiles);
  return {warps, split};
}

// Whether the wide kernel takes this call: sm_90 (clusters), and a split whose shared memory fits.
template <typename T, Epilogue E>
bool wide_fits(const GemvArgs<T>& a) {
  if (compute_major(current_device()) < 9) return false;
  const int nt = a.num_tokens <= 8 ? 1 : (a.num_tokens <= 16 ? 2 : 4);
  return wide_shape<T, E>(a, nt).split > 0;
}

template <typename T, int NT, Epilogue E, int D>
void launch_wide(const GemvArgs<T>& a, const WideShape& w, cudaStream_t stream) {
  const int tiles = mma_tiles<T, E>(a), blocks = (tiles + w.warps - 1) / w.warps;
  const size_t smem = wide_smem<T, E>(NT, a.K / w.split, w.warps, w.split, D);
  C10_CUDA_CHECK(cudaFuncSetAttribute(gemv_wide_kernel<T, NT, E, D>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t cfg =
      pdl::launch_config(dim3(w.split, blocks), dim3(w.warps * 32), smem, stream, attr, a.pdl);
  if (w.split > 1) {
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = w.split;
    attr[1].val.clusterDim.y = 1;
    attr[1].val.clusterDim.z = 1;
    cfg.numAttrs = 2;
  }
  C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, gemv_wide_kernel<T, NT, E, D>, a));
}

// The ring's depth: kWideStages, or with VGRAPH_WIDE_STAGES=n (8-11; comparisons, read at each
// launch) the deeper ring instantiated for the launch's column tiles (11 stages at one tile, 9 at
// two) if n reaches it and a split fits its shared memory (the rule's split for that ring; Llama-
// 3.2-1B's gate/up stays unsplit), else kWideStages. Default 8: the kernel keeps 7 chunks of 2 KiB
// a warp in flight, 14.7 MB over Llama-3.2-1B's gate/up grid; 10 a warp made its batch-1 step
// slower on an H100 (1.073 against 1.057 ms), its batch 16 no faster (1.365 against 1.366), so the
// bytes in flight do not bound its rate (benchmarks/results/2026-12-05-h200-fold-argmax/, call 1).
template <typename T, int NT, Epilogue E>
void launch_wide_nt(const GemvArgs<T>& a, cudaStream_t stream) {
  const int want = env_int("VGRAPH_WIDE_STAGES", kWideStages, kWideStages, kWideDeepStages1);
  constexpr int kDeep = NT == 1 ? kWideDeepStages1 : NT == 2 ? kWideDeepStages2 : kWideStages;
  if constexpr (kDeep > kWideStages) {
    if (want >= kDeep) {
      const WideShape deep = wide_shape<T, E>(a, NT, kDeep);
      if (deep.split > 0) return launch_wide<T, NT, E, kDeep>(a, deep, stream);
    }
  }
  launch_wide<T, NT, E, kWideStages>(a, wide_shape<T, E>(a, NT), stream);
}

// The packed weight (GemvArgs::wide_packed): [tiles][K / kMmaK][kWideStageVecs] 16-byte vectors.
// Vector (s, lane) of tile t's chunk c is what the row-major loads would put in the ring's slot
// s * 32 + lane: row mma_row(t, lane / 4 + 8 (s / kMmaVecs)), columns from
// c kMmaK + 8 (4 (s % kMmaVecs) + lane % 4); zeros for rows past N.
template <typename T, Epilogue E>
__global__ void pack_wide_kernel(const GemvArgs<T> a, uint4* out, int64_t total) {
  const int chunks = a.K / kMmaK;
  const uint4* w = reinterpret_cast<const uint4*>(a.weight);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int lane = static_cast<int>(i % 32), s = static_cast<int>(i / 32 % (2 * kMmaVecs));
    const int64_t tc = i / kWideStageVecs;
    const int c = static_cast<int>(tc % chunks), t = static_cast<int>(tc / chunks);
    const int row = mma_row<T, E>(a, t, lane / 4 + 8 * (s / kMmaVecs));
    const int64_t v = static_cast<int64_t>(c) * (kMmaK / 8) + 4 * (s % kMmaVecs) + lane % 4;
    out[i] = row < a.N ? w[static_cast<int64_t>(row) * (a.K / 8) + v] : make_uint4(0, 0, 0, 0);
  }
}

template <typename T, Epilogue E>
int64_t wide_packed_numel(const GemvArgs<T>& a) {
  return static_cast<int64_t>(mma_tiles<T, E>(a)) * kMmaRows * a.K;
}

template <typename T, Epilogue E>
void pack_wide(const GemvArgs<T>& a, T* out, cudaStream_t stream) {
  const int64_t total = wide_packed_numel<T, E>(a) / 8;
  const int blocks = static_cast<int>(std::min<int64_t>((total + 255) / 256, 65535));
  pack_wide_kernel<T, E><<<blocks, 256, 0, stream>>>(a, reinterpret_cast<uint4*>(out), total);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, Epilogue E>
bool launch_gemv_wide(const GemvArgs<T>& a, cudaStream_t stream) {
  if (!wide_fits<T, E>(a)) return false;
  if (a.num_tokens <= 8) {
    launch_wide_nt<T, 1, E>(a, stream);
  } else if (a.num_tokens <= 16) {
    launch_wide_nt<T, 2, E>(a, stream);
  } else {
    launch_wide_nt<T, 4, E>(a, stream);
  }
  return true;
}

}  // namespace gemv
}  // namespace vgraph
