// The tensor-core GEMV of the fused decode ops (declared in decode_gemv.h): the same prologues and
// epilogues as the CUDA-core kernel (decode_gemv.cuh, whose helpers it uses), for the token counts
// at which one FMA per weight per token makes that kernel compute-bound.
//
// Tiling. A CTA owns 16 output rows: tile rows i < 8 and their partners i + 8 (gate row j and up
// row j; rotate-half partners j and j + head_size / 2; 16 consecutive rows for the plain
// epilogues), so each thread's accumulator holds both halves of its pairs. Its W warps (4, 8 or 16,
// from the tile count and K: mma_warps) split K in chunks of kMmaK = 64 (warp w takes chunks w, w +
// W, ...); a chunk is four mma.sync.m16n8k16 steps per 8 tokens. The dot product does not care in
// which order k runs, so lane (g = lane / 4, q = lane % 4) loads the 16-byte vectors v = 0, 1 at k
// = 32v + 8q of the chunk, of weight rows g and g + 8 and of token g's activation, and the steps
// take words (0, 1) and (2, 3) of each: A and B see the same permutation of k, every load is a
// 16-byte vector, and each load instruction reads 64 contiguous bytes of a row.
//
// Order of work. The first kMmaPreload weight chunks of each warp are loaded before
// `griddepcontrol.wait` (PDL: they stream while the previous kernel finishes); each chunk's slot is
// refilled as soon as it is consumed. The norm ops multiply the 16 values a lane feeds to the mma
// by the norm weight and sum their squares in the same pass; the epilogue scales each token's sums
// by its 1 / rms (GemvArgs::norm_scaled; without it a prologue computes every token's 1 / rms once
// per CTA, a warp per token, and the values are normalized with RMSNorm's roundings).
// Warps' partial tiles meet in shared memory; 2 NT warps add them up (a token parity of a column
// tile each) and write the epilogue.
//
// Above 8 tokens a small matrix's launch is split by tokens (mma_split): a grid row of CTAs of one
// column tile per 8 tokens, each reading the weights again (from L2 where the rows run together).
#pragma once

namespace vgraph {
namespace gemv {

template <typename T>
struct Mma;

template <>
struct Mma<c10::BFloat16> {
  static __device__ __forceinline__ void run(float* c, uint32_t a0, uint32_t a1, uint32_t a2,
                                             uint32_t a3, uint32_t b0, uint32_t b1) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};

template <>
struct Mma<c10::Half> {
  static __device__ __forceinline__ void run(float* c, uint32_t a0, uint32_t a1, uint32_t a2,
                                             uint32_t a3, uint32_t b0, uint32_t b1) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};

// Output row of tile row i (0..15) of CTA `tile`.
template <typename T, Epilogue E>
__device__ __forceinline__ int mma_row(const GemvArgs<T>& a, int tile, int i) {
  const int pair = i & 7, second = i >> 3;
  if constexpr (E == Epilogue::kSiluMul) {
    return second * (a.N / 2) + tile * 8 + pair;
  } else if constexpr (E == Epilogue::kQkvRope) {
    const int half = a.head_size / 2, groups = half / 8;
    const int head = tile / groups, j = (tile - head * groups) * 8 + pair;
    return head * a.head_size + second * half + j;
  } else {
    return tile * kMmaRows + i;
  }
}

// NT: 8-token column tiles (1, 2 or 4: up to 8, 16 or 32 tokens). A launch split by tokens
// (gridDim.y > 1, NT = 1: mma_split) gives CTA row blockIdx.y tokens 8 * blockIdx.y on.
// G: gather_x's code (up to 2 column tiles), compiled apart so that neither version holds the
// other's registers.
template <typename T, int NT, Epilogue E, bool G = false>
__global__ void __launch_bounds__(kMmaMaxWarps * 32) gemv_mma_kernel(const GemvArgs<T> a) {
  static_assert(!G || NT <= 2, "gather_x is for up to 2 column tiles");
  constexpr bool kNorm = has_norm(E);
  constexpr int P = kMmaPreload;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = blockDim.x / 32;
  const int g = lane / 4, q = lane % 4;
  const int tok0 = blockIdx.y * NT * 8;  // this CTA's first token (its tokens: m = 0, 1, ...)
  const int m_count = min(a.num_tokens - tok0, NT * 8);
  const T* x = a.x + tok0 * a.x_stride;

  // 1. This lane's two weight rows (g and g + 8 of the tile) and this warp's chunks.
  const int row0 = mma_row<T, E>(a, blockIdx.x, g), row1 = mma_row<T, E>(a, blockIdx.x, g + 8);
  const bool valid0 = row0 < a.N, valid1 = row1 < a.N;  // the last tile of a plain epilogue
  const uint4* w0 =
      reinterpret_cast<const uint4*>(a.weight + static_cast<int64_t>(valid0 ? row0 : 0) * a.K) + q;
  const uint4* w1 =
      reinterpret_cast<const uint4*>(a.weight + static_cast<int64_t>(valid1 ? row1 : 0) * a.K) + q;
  const int num_chunks = a.K / kMmaK;
  const int my_chunks = warp < num_chunks ? (num_chunks - warp + num_warps - 1) / num_warps : 0;

  // 2. Before the wait: the first P chunks; the norm weight, staged in shared memory by cp.async
  // (after the tile sums: s_nw); each token's cos / sin of the tile's 8 pairs; the lane's bias.
  extern __shared__ __align__(16) unsigned char smem[];
  float* s_acc = reinterpret_cast<float*>(smem);  // [num_warps][NT * 4][32]
  const T* s_nw = reinterpret_cast<const T*>(s_acc + num_warps * NT * 4 * 32);  // [K]
  __shared__ float2 s_epi[NT * 8][8];  // [token][pair]: cos, sin (kQkvRope); residual (kAddResidual)
  uint4 wa[P][kMmaVecs], wb[P][kMmaVecs];
  const uint64_t policy = weight_policy(a.l2_evict_first);
  auto load = [&](int j, int slot) {
    if (j < my_chunks) {
      const int c = (warp + j * num_warps) * (kMmaK / 8);  // in 16-byte vectors
#pragma unroll
      for (int v = 0; v < kMmaVecs; ++v) {
        wa[slot][v] = load_stream(w0 + c + 4 * v, policy);
        wb[slot][v] = load_stream(w1 + c + 4 * v, policy);
      }
    }
  };
#pragma unroll
  for (int s = 0; s < P; ++s) load(s, s);
  if constexpr (kNorm) {
    for (int i = threadIdx.x; i < a.K / 8; i += blockDim.x) {
      cp_async16(const_cast<T*>(s_nw) + i * 8, a.norm_weight + i * 8);
    }
    cp_async_commit();
  }
  EpiIn in;  // warps 0 .. 2 NT - 1 write the epilogue: lane (g, q) holds the rows of pair g
  if (warp < NT * 2) epi_before_wait<T, E>(a, tok0, row0, row1, in);  // the bias; rope from s_epi
  if constexpr (E == Epilogue::kQkvRope) {
    for (int i = threadIdx.x; i < m_count * 8; i += blockDim.x) {
      EpiIn e;
      epi_before_wait<T, E>(a, tok0 + i / 8, mma_row<T, E>(a, blockIdx.x, i % 8),
                            mma_row<T, E>(a, blockIdx.x, i % 8 + 8), e);
      s_epi[i / 8][i % 8] = make_float2(e.c, e.s);
    }
  }
  pdl::launch_dependents();
  pdl::wait();  // everything below may read what the previous kernel wrote

  // The residual's values at the tile's pairs, loaded now, stored in s_epi with the tile sums.
  constexpr int kResLoads = (NT * 8 * 8 + 127) / 128;  // per thread: CTAs have >= 128 threads
  float2 res[kResLoads];
  if constexpr (E == Epilogue::kAddResidual) {
#pragma unroll
    for (int j = 0; j < kResLoads; ++j) {
      const int i = threadIdx.x + j * blockDim.x, p = i % 8;
      EpiIn e;
      if (i < m_count * 8) {
        const int r0 = mma_row<T, E>(a, blockIdx.x, p), r1 = mma_row<T, E>(a, blockIdx.x, p + 8);
        epi_after_wait<T, E>(a, tok0 + i / 8, r0, r1, r0 < a.N, r1 < a.N, e);
      }
      res[j] = make_float2(e.r0, e.r1);
    }
  }
  if constexpr (kNorm) cp_async_wait<0>();  // s_nw: visible to all after the barrier below

  // 3. RMSNorm prologue: each token's 1 / rms; warp w takes tokens w, w + W, ..., all of them in
  // one pass over K, so their loads are in flight together (a token after another would cost a
  // round trip each). With scaled sums (GemvArgs::norm_scaled) the mma steps take norm_weight * x
  // and the squares are summed in the same pass (step 4), each token's sums scaled by its 1 / rms
  // in the epilogue: no pass over the activations before the first mma.
  const bool scaled = kNorm && a.norm_scaled;
  __shared__ float s_inv_rms[NT * 8];
  // scaled: [warp][token], each warp's sums of squares
  __shared__ float s_sq[kNorm ? kMmaMaxWarps : 1][NT * 8];
  if (scaled) {
    __syncthreads();  // s_nw
  } else if constexpr (kNorm) {
    constexpr int kPerWarp = NT * 8 / 4;  // CTAs have at least 4 warps
    const int num_vecs = a.K / 8;
    float sq[kPerWarp];
#pragma unroll
    for (int i = 0; i < kPerWarp; ++i) sq[i] = 0.f;
    for (int k = lane; k < num_vecs; k += 32) {
#pragma unroll
      for (int i = 0; i < kPerWarp; ++i) {
        const int m = warp + i * num_warps;
        if (m < m_count) {
          sq[i] = add_squares8<T>(*reinterpret_cast<const uint4*>(x + m * a.x_stride + k * 8),
                                  sq[i]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kPerWarp; ++i) {
      const int m = warp + i * num_warps;
      const float s = warp_sum(sq[i]);
      if (lane == 0 && m < m_count) s_inv_rms[m] = rsqrtf(s / static_cast<float>(a.K) + a.eps);
    }
    __syncthreads();
  }
  float inv_rms[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int m = nt * 8 + g;
    inv_rms[nt] = kNorm && !scaled && m < m_count ? s_inv_rms[m] : 0.f;
  }

  // 4. The warp's chunks, each slot refilled once consumed: per column tile, the lane's 16 values
  // of token g (normalized, or times the norm weight with scaled sums, for the norm ops), then
  // kMmaVecs * 2 mma steps.
  float acc[NT][4], sq[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
    sq[nt] = 0.f;
  }
  // With gather_x (GemvArgs; G) up to 16 tokens, cp.async copies the activations of the warp's
  // next chunks to its shared-memory slots ([chunk][column tile][vector][lane], 2 KiB a warp:
  // zero-filled past its chunks and the tokens, from addresses clamped to its last ones), all in
  // flight at once, then waits for them: up to 8 tokens P chunks, at 9-16 one. A round trip for
  // those chunks, where loads of each vector where it is used, behind the token bound, took one
  // for each chunk up to 8 tokens and 2-3 for each at 16. (Loaded to registers instead, ptxas put
  // mma steps between a chunk's loads at 16 tokens: 2 round trips.)
  constexpr bool gather = G;
  constexpr int kStageChunks = NT == 1 ? P : 1;
  uint4* s_x = reinterpret_cast<uint4*>(const_cast<T*>(s_nw) + (kNorm ? a.K : 0)) +
               warp * kStageChunks * NT * kMmaVecs * 32;
  auto stage = [&](int j) {  // chunks j .. j + kStageChunks - 1
    compiler_fence();        // the slots' earlier reads, then their refill
#pragma unroll
    for (int c = 0; c < kStageChunks; ++c) {
      const int jc = j + c, k = (warp + min(jc, my_chunks - 1) * num_warps) * kMmaK + q * 8;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int m = nt * 8 + g;
        const T* xm = x + min(m, m_count - 1) * a.x_stride + k;
#pragma unroll
        for (int v = 0; v < kMmaVecs; ++v) {
          cp_async16(&s_x[((c * NT + nt) * kMmaVecs + v) * 32 + lane], xm + v * 32,
                     jc < my_chunks && m < m_count);
        }
      }
    }
    cp_async_commit();
    cp_async_wait<0>();
    compiler_fence();
  };
  for (int j0 = 0; j0 < my_chunks; j0 += P) {
    if constexpr (gather && kStageChunks == P) stage(j0);
#pragma unroll
    for (int s = 0; s < P; ++s) {
      const int j = j0 + s;
      if (j >= my_chunks) break;
      if constexpr (gather && kStageChunks == 1) stage(j);
      uint4 A0[kMmaVecs], A1[kMmaVecs];
#pragma unroll
      for (int v = 0; v < kMmaVecs; ++v) A0[v] = wa[s][v], A1[v] = wb[s][v];
      load(j + P, s);
      const int k = (warp + j * num_warps) * kMmaK + q * 8;  // + 32 v: this lane's 16 of K
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int m = nt * 8 + g;
        if (nt * 8 >= m_count) break;  // the whole column tile is padding
#pragma unroll
        for (int v = 0; v < kMmaVecs; ++v) {
          uint4 xb = {0u, 0u, 0u, 0u};
          if (m < m_count) {
            const int c = kStageChunks == 1 ? 0 : s;  // the chunk's slots
            xb = gather ? s_x[((c * NT + nt) * kMmaVecs + v) * 32 + lane]
                        : *reinterpret_cast<const uint4*>(x + m * a.x_stride + k + v * 32);
            if constexpr (kNorm) {
              const uint4 nw = *reinterpret_cast<const uint4*>(s_nw + k + v * 32);
              if (scaled) {
                sq[nt] = add_squares8<T>(xb, sq[nt]);
                xb = mul8<T>(xb, nw);
              } else {
                xb = norm8<T>(xb, nw, inv_rms[nt]);
              }
            }
          }
          Mma<T>::run(acc[nt], A0[v].x, A1[v].x, A0[v].y, A1[v].y, xb.x, xb.y);
          Mma<T>::run(acc[nt], A0[v].z, A1[v].z, A0[v].w, A1[v].w, xb.z, xb.w);
        }
      }
    }
  }

  // 5. Warps' partial tiles meet in shared memory ([warp][value][lane]: no bank conflicts).
  if constexpr (E == Epilogue::kAddResidual) {
#pragma unroll
    for (int j = 0; j < kResLoads; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      if (i < m_count * 8) s_epi[i / 8][i % 8] = res[j];
    }
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s_acc[(warp * NT * 4 + nt * 4 + e) * 32 + lane] = acc[nt][e];
    if (scaled) {  // token g's squares over the warp's chunks: the lanes q = 0..3 hold them
      float v = sq[nt];
      v += __shfl_xor_sync(0xffffffffu, v, 1);
      v += __shfl_xor_sync(0xffffffffu, v, 2);
      if (q == 0) s_sq[warp][nt * 8 + g] = v;
    }
  }
  __syncthreads();

  // 6. Epilogue, spread over the warps: warp p adds up the partials of token parity t = p % 2 of
  // column tile p / 2 (values t and 2 + t of the mma tile: rows g, g + 8 of token 2q + t) and
  // writes them, so the reduction's loads and the stores are not all one warp's.
  for (int p = warp; p < NT * 2; p += num_warps) {
    const int nt = p / 2, t = p % 2, m = nt * 8 + 2 * q + t;
    if (nt * 8 >= m_count) break;  // this tile and the next are padding (warp-uniform)
    float y0 = 0.f, y1 = 0.f;
    for (int w = 0; w < num_warps; ++w) {
      y0 += s_acc[(w * NT * 4 + nt * 4 + t) * 32 + lane];
      y1 += s_acc[(w * NT * 4 + nt * 4 + 2 + t) * 32 + lane];
    }
    if (m >= m_count) continue;
    if (scaled) {
      float ss = 0.f;
      for (int w = 0; w < num_warps; ++w) ss += s_sq[w][m];
      const float r = rsqrtf(ss / static_cast<float>(a.K) + a.eps);
      y0 *= r, y1 *= r;
    }
    if constexpr (E == Epilogue::kQkvRope) in.c = s_epi[m][g].x, in.s = s_epi[m][g].y;
    if constexpr (E == Epilogue::kAddResidual) in.r0 = s_epi[m][g].x, in.r1 = s_epi[m][g].y;
    write_pair<T, E>(a, tok0 + m, row0, row1, valid0, valid1, y0, y1, in);
  }
}

// Warps per CTA, 4 to 16: more while each warp still has more chunks than its preload and the grid
// stays within 16 warps per SM (a 2048-row down projection has 128 tiles: 16 warps; a gate/up
// projection of 1024 tiles keeps 4, several CTAs per SM streaming for longer). With
// warp_per_chunk (GemvArgs), a warp for each of 5-16 chunks within the same 16 warps an SM
// (SmolLM2-135M's QKV and O at K = 576: 9 warps, not 8, whose first warp takes two chunks). On an
// H200 at 16 tokens (2026-12-04-h200-norm-scaled, call 7, both ops at once) their calls took 3.04
// and 2.55 us against 3.39 and 3.09, but attention after the QKV took 5.8 against 3.9 us.
inline int mma_warps(int num_tiles, int num_chunks, bool warp_per_chunk) {
  if (warp_per_chunk && num_chunks > 4 && num_chunks <= kMmaMaxWarps &&
      num_tiles * 2 * num_chunks <= 16 * num_sms()) {
    return num_chunks;
  }
  int w = 4;
  while (w < kMmaMaxWarps && w * kMmaPreload < num_chunks && num_tiles * 2 * w <= 16 * num_sms()) {
    w *= 2;
  }
  return w;
}

// A warp's activation slots (gather_x): kMmaPreload chunks of one column tile or one of two.
constexpr size_t kMmaStageBytes = sizeof(uint4) * kMmaPreload * kMmaVecs * 32;
static_assert(kMmaPreload == 2, "the slots of 2 column tiles hold one chunk");

// Dynamic shared memory of a CTA of NT column tiles and `warps` warps: the partial tiles, the norm
// weight, the activations' slots (gather_x, up to 2 column tiles).
template <typename T, Epilogue E>
size_t mma_smem(const GemvArgs<T>& a, int nt, int warps) {
  return static_cast<size_t>(warps) * nt * 4 * 32 * sizeof(float) +
         (has_norm(E) ? static_cast<size_t>(a.K) * sizeof(T) : 0) +
         (a.gather_x && nt <= 2 ? kMmaStageBytes * warps : 0);
}

template <typename T, Epilogue E>
__host__ __device__ __forceinline__ int mma_tiles(const GemvArgs<T>& a) {
  if constexpr (E == Epilogue::kSiluMul) return a.N / 2 / 8;
  if constexpr (E == Epilogue::kQkvRope) return a.N / kMmaRows;
  return (a.N + kMmaRows - 1) / kMmaRows;
}

// Whether a launch over more than 8 tokens runs CTAs of 8 tokens each (a grid row of CTAs of one
// column tile, NT = 1, per 8 tokens) instead of CTAs of 2 or 4 column tiles: for a matrix of at
// most kMmaSplitMib MiB, whose weights the extra rows read again in a fraction of a kernel's fixed
// cost, where the split grid still fits the GPU at once. A CTA of one column tile has the shorter
// critical path (half the accumulators, partials and stores). Measured on an H200 at 16 tokens
// (2026-12-03-h200-mma-rows, call 3), per call: SmolLM2-135M's QKV 3.76 against 4.86 us, o 2.44
// against 3.25, down 2.70 against 3.53, Qwen3-0.6B's o 3.73 against 3.87; its gate/up, whose split
// grid takes two waves, 7.35 against 5.41; Llama-3.2-1B's matrices (8-64 MiB) lose 2-14 us. Each
// token's sums are the same either way (mma columns are independent; the warps split K alike):
// bit-equal. VGRAPH_MMA_SPLIT=0 / 1 never / always splits (comparisons; read at each launch, so a
// graph keeps what it was captured with).
constexpr int kMmaSplitMib = 4;

// The kernel of NT column tiles that a's launch runs: gather_x's version up to 2.
template <typename T, int NT, Epilogue E>
auto mma_kernel(const GemvArgs<T>& a) -> void (*)(const GemvArgs<T>) {
  if constexpr (NT <= 2) {
    if (a.gather_x) return gemv_mma_kernel<T, NT, E, true>;
  }
  return gemv_mma_kernel<T, NT, E>;
}

// Lets `kernel` take `smem` bytes of dynamic shared memory near or past the 48 KiB default (static
// shared memory counts too), before it is launched or its occupancy queried (which answers 0 CTAs,
// not an error, past the limit).
template <typename Kernel>
void opt_in_smem(Kernel kernel, size_t smem) {
  if (smem > 40 * 1024) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
  }
}

template <typename T, Epilogue E>
bool mma_split(const GemvArgs<T>& a, int tiles, int warps, size_t smem) {
  const int force = env_int("VGRAPH_MMA_SPLIT", -1, 0, 1);  // -1: the rule
  if (force >= 0) return force == 1;
  if (static_cast<int64_t>(a.N) * a.K * sizeof(T) > (static_cast<int64_t>(kMmaSplitMib) << 20)) {
    return false;
  }
  int fit = 0;  // CTAs of one column tile an SM holds
  const auto kernel = mma_kernel<T, 1, E>(a);
  opt_in_smem(kernel, smem);
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernel, warps * 32, smem));
  return static_cast<int64_t>(tiles) * ((a.num_tokens + 7) / 8) <=
         static_cast<int64_t>(fit) * num_sms();
}

// The launch of `slices` grid rows of CTAs of NT column tiles (more than one row: NT = 1).
template <typename T, int NT, Epilogue E>
void launch_mma_nt(const GemvArgs<T>& a, int slices, cudaStream_t stream) {
  const int tiles = mma_tiles<T, E>(a), warps = mma_warps(tiles, a.K / kMmaK, a.warp_per_chunk);
  const size_t smem = mma_smem<T, E>(a, NT, warps);
  const auto kernel = mma_kernel<T, NT, E>(a);
  opt_in_smem(kernel, smem);
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg =
      pdl::launch_config(dim3(tiles, slices), dim3(warps * 32), smem, stream, attr, a.pdl);
  C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, a));
}

template <typename T, Epilogue E>
void launch_gemv_mma(const GemvArgs<T>& a, cudaStream_t stream) {
  int m = a.num_tokens;
  // VGRAPH_MMA_NT=1, 2 or 4 (comparisons only: what the column tiles cost apart from the tokens)
  // launches at least that many; read at each launch, so a graph keeps what it was captured with.
  // It also keeps the column tiles whole (no split).
  const char* nt = std::getenv("VGRAPH_MMA_NT");
  const bool forced_nt = nt != nullptr && nt[0] != '\0';
  if (forced_nt) m = std::max(m, 8 * std::atoi(nt) - 7);
  if (m <= 8) return launch_mma_nt<T, 1, E>(a, 1, stream);
  const int tiles = mma_tiles<T, E>(a), warps = mma_warps(tiles, a.K / kMmaK, a.warp_per_chunk);
  if (!forced_nt && mma_split<T, E>(a, tiles, warps, mma_smem<T, E>(a, 1, warps))) {
    return launch_mma_nt<T, 1, E>(a, (a.num_tokens + 7) / 8, stream);
  }
  if (m <= 16) return launch_mma_nt<T, 2, E>(a, 1, stream);
  launch_mma_nt<T, 4, E>(a, 1, stream);
}

}  // namespace gemv
}  // namespace vgraph
