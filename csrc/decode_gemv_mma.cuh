// The tensor-core GEMV of the fused decode ops (declared in decode_gemv.h): the same prologues and
// epilogues as the CUDA-core kernel (decode_gemv.cuh, whose helpers it uses), for the token counts
// at which one FMA per weight per token makes that kernel compute-bound.
//
// Tiling. A tile is 16 output rows: tile rows i < 8 and their partners i + 8 (gate row j and up
// row j; rotate-half partners j and j + head_size / 2; 16 consecutive rows for the plain
// epilogues), so each thread's accumulator holds both halves of its pairs. A CTA owns RT tiles
// (1, 2 or 4: mma_row_tiles; more where the grid stays at least a CTA per SM, so large matrices
// read the activations fewer times). Its W warps (4, 8 or 16, from the tile count and K: mma_warps)
// split K in chunks of kMmaK = 64 (warp w takes chunks w, w + W, ...); a chunk is four
// mma.sync.m16n8k16 steps per 8 tokens and row tile. The dot product does not care in
// which order k runs, so lane (g = lane / 4, q = lane % 4) loads the 16-byte vectors v = 0, 1 at k
// = 32v + 8q of the chunk, of weight rows g and g + 8 and of token g's activation, and the steps
// take words (0, 1) and (2, 3) of each: A and B see the same permutation of k, every load is a
// 16-byte vector, and each load instruction reads 64 contiguous bytes of a row.
//
// Order of work. The first kMmaPreload weight chunks of each warp (one at RT = 4) are loaded before
// `griddepcontrol.wait` (PDL: they stream while the previous kernel finishes); each chunk's slot is
// refilled as soon as it is consumed. The norm prologue computes every token's 1 / rms once per CTA
// (a warp per token) and normalizes the 16 values a lane feeds to the mma with RMSNorm's roundings.
// Warps' partial tiles meet in shared memory; 2 NT RT tasks (a token parity of a column tile of a
// row tile each), spread over the warps, add them up and write the epilogue.
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

// Warps per CTA at most: 16, or 8 for 4 row tiles, whose registers would not fit 16.
template <int RT>
constexpr int kMmaMaxWarps = RT >= 4 ? 8 : 16;

// NT: 8-token column tiles (1, 2 or 4: up to 8, 16 or 32 tokens). RT: row tiles per CTA (1, 2 or
// 4; more than one only for NT <= 2): tiles blockIdx.x * RT + r, each activation fragment a warp
// loads (and normalizes) feeds all RT of them, so the CTAs of a large matrix read the [M, K]
// activations RT times less often (Llama-3.2-1B's gate/up at 16 tokens: 1,024 tiles, each reading
// all 64 KiB of them twice, 128 MiB from L2 against 64 MiB of weights). Per tile the arithmetic,
// its order included, is that of RT = 1: bit-equal.
template <typename T, int NT, int RT, Epilogue E>
__global__ void __launch_bounds__(kMmaMaxWarps<RT> * 32) gemv_mma_kernel(const GemvArgs<T> a) {
  constexpr bool kNorm = has_norm(E);
  constexpr int P = RT >= 2 ? 1 : kMmaPreload;  // chunks in flight: P * RT tiles' worth
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = blockDim.x / 32;
  const int g = lane / 4, q = lane % 4;
  const int m_count = a.num_tokens;

  // 1. This lane's two weight rows (g and g + 8) of each of the CTA's tiles (rows past N, in the
  // last tile of a plain epilogue, read row 0 and write nothing), and this warp's chunks.
  int row0[RT], row1[RT];
#pragma unroll
  for (int r = 0; r < RT; ++r) {
    row0[r] = mma_row<T, E>(a, blockIdx.x * RT + r, g);
    row1[r] = mma_row<T, E>(a, blockIdx.x * RT + r, g + 8);
  }
  auto row_ptr = [&](int row) {
    return reinterpret_cast<const uint4*>(a.weight +
                                          static_cast<int64_t>(row < a.N ? row : 0) * a.K) + q;
  };
  const int num_chunks = a.K / kMmaK;
  const int my_chunks = warp < num_chunks ? (num_chunks - warp + num_warps - 1) / num_warps : 0;

  // 2. Before the wait: the first P chunks; the norm weight, staged in shared memory by cp.async
  // (after the tile sums: s_nw); each token's cos / sin of the tiles' 8 pairs; the lanes' bias.
  extern __shared__ __align__(16) unsigned char smem[];
  float* s_acc = reinterpret_cast<float*>(smem);  // [num_warps][RT][NT * 4][32]
  const T* s_nw = reinterpret_cast<const T*>(s_acc + num_warps * RT * NT * 4 * 32);  // [K]
  // [tile][token][pair]: cos, sin (kQkvRope); residual (kAddResidual)
  __shared__ float2 s_epi[RT][NT * 8][8];
  uint4 wa[P][RT][kMmaVecs], wb[P][RT][kMmaVecs];
  auto load = [&](int j, int slot) {
    if (j < my_chunks) {
      const int c = (warp + j * num_warps) * (kMmaK / 8);  // in 16-byte vectors
#pragma unroll
      for (int r = 0; r < RT; ++r) {
#pragma unroll
        for (int v = 0; v < kMmaVecs; ++v) {
          wa[slot][r][v] = load_stream(row_ptr(row0[r]) + c + 4 * v);
          wb[slot][r][v] = load_stream(row_ptr(row1[r]) + c + 4 * v);
        }
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
  // The epilogue's tasks (tile r, column tile nt, token parity t) go to warps in turn: task
  // (r * NT + nt) * 2 + t to warp task % num_warps, whose lane (g, q) holds the rows of pair g.
  EpiIn in[RT];
#pragma unroll
  for (int r = 0; r < RT; ++r) {
    if (warp < RT * NT * 2) epi_before_wait<T, E>(a, 0, row0[r], row1[r], in[r]);  // the bias
  }
  if constexpr (E == Epilogue::kQkvRope) {
    for (int i = threadIdx.x; i < RT * m_count * 8; i += blockDim.x) {
      const int r = i / (m_count * 8), m = i / 8 % m_count, p = i % 8;
      EpiIn e;
      epi_before_wait<T, E>(a, m, mma_row<T, E>(a, blockIdx.x * RT + r, p),
                            mma_row<T, E>(a, blockIdx.x * RT + r, p + 8), e);
      s_epi[r][m][p] = make_float2(e.c, e.s);
    }
  }
  pdl::launch_dependents();
  pdl::wait();  // everything below may read what the previous kernel wrote

  // The residual's values at the tiles' pairs, loaded now, stored in s_epi with the tile sums.
  constexpr int kResLoads = (RT * NT * 8 * 8 + 127) / 128;  // per thread: CTAs have >= 128 threads
  float2 res[kResLoads];
  if constexpr (E == Epilogue::kAddResidual) {
#pragma unroll
    for (int j = 0; j < kResLoads; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      const int r = i / (m_count * 8), m = i / 8 % m_count, p = i % 8;
      EpiIn e;
      if (i < RT * m_count * 8) {
        const int tile = blockIdx.x * RT + r;
        const int r0 = mma_row<T, E>(a, tile, p), r1 = mma_row<T, E>(a, tile, p + 8);
        epi_after_wait<T, E>(a, m, r0, r1, r0 < a.N, r1 < a.N, e);
      }
      res[j] = make_float2(e.r0, e.r1);
    }
  }
  if constexpr (kNorm) cp_async_wait<0>();  // s_nw: visible to all after the barrier below

  // 3. RMSNorm prologue: each token's 1 / rms; warp w takes tokens w, w + W, ..., all of them in
  // one pass over K, so their loads are in flight together (a token after another would cost a
  // round trip each).
  __shared__ float s_inv_rms[NT * 8];
  if constexpr (kNorm) {
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
          float f[8];
          unpack8<T>(*reinterpret_cast<const uint4*>(a.x + m * a.x_stride + k * 8), f);
#pragma unroll
          for (int j = 0; j < 8; ++j) sq[i] = fmaf(f[j], f[j], sq[i]);
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
    inv_rms[nt] = kNorm && m < m_count ? s_inv_rms[m] : 0.f;
  }

  // 4. The warp's chunks, each slot refilled once consumed: per column tile, the lane's 16 values
  // of token g (normalized for the norm ops), then kMmaVecs * 2 mma steps for each row tile.
  float acc[RT][NT][4];
#pragma unroll
  for (int r = 0; r < RT; ++r) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) acc[r][nt][0] = acc[r][nt][1] = acc[r][nt][2] = acc[r][nt][3] = 0.f;
  }
  for (int j0 = 0; j0 < my_chunks; j0 += P) {
#pragma unroll
    for (int s = 0; s < P; ++s) {
      const int j = j0 + s;
      if (j >= my_chunks) break;
      uint4 A0[RT][kMmaVecs], A1[RT][kMmaVecs];
#pragma unroll
      for (int r = 0; r < RT; ++r) {
#pragma unroll
        for (int v = 0; v < kMmaVecs; ++v) A0[r][v] = wa[s][r][v], A1[r][v] = wb[s][r][v];
      }
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
            xb = *reinterpret_cast<const uint4*>(a.x + m * a.x_stride + k + v * 32);
            if constexpr (kNorm) {
              xb = norm8<T>(xb, *reinterpret_cast<const uint4*>(s_nw + k + v * 32), inv_rms[nt]);
            }
          }
#pragma unroll
          for (int r = 0; r < RT; ++r) {
            Mma<T>::run(acc[r][nt], A0[r][v].x, A1[r][v].x, A0[r][v].y, A1[r][v].y, xb.x, xb.y);
            Mma<T>::run(acc[r][nt], A0[r][v].z, A1[r][v].z, A0[r][v].w, A1[r][v].w, xb.z, xb.w);
          }
        }
      }
    }
  }

  // 5. Warps' partial tiles meet in shared memory ([warp][tile][value][lane]: no bank conflicts).
  if constexpr (E == Epilogue::kAddResidual) {
#pragma unroll
    for (int j = 0; j < kResLoads; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      if (i < RT * m_count * 8) s_epi[i / (m_count * 8)][i / 8 % m_count][i % 8] = res[j];
    }
  }
#pragma unroll
  for (int r = 0; r < RT; ++r) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s_acc[(((warp * RT + r) * NT + nt) * 4 + e) * 32 + lane] = acc[r][nt][e];
      }
    }
  }
  __syncthreads();

  // 6. Epilogue, spread over the warps: task (r, nt, t) adds up the partials of token parity t of
  // column tile nt of row tile r (values t and 2 + t of the mma tile: rows g, g + 8 of token 2q +
  // t) and writes them, so the reduction's loads and the stores are not all one warp's.
#pragma unroll
  for (int r = 0; r < RT; ++r) {
    for (int p = 0; p < NT * 2; ++p) {
      if ((r * NT * 2 + p) % num_warps != warp) continue;
      const int nt = p / 2, t = p % 2, m = nt * 8 + 2 * q + t;
      if (nt * 8 >= m_count) break;  // this tile and the next are padding (warp-uniform)
      float y0 = 0.f, y1 = 0.f;
      for (int w = 0; w < num_warps; ++w) {
        y0 += s_acc[(((w * RT + r) * NT + nt) * 4 + t) * 32 + lane];
        y1 += s_acc[(((w * RT + r) * NT + nt) * 4 + 2 + t) * 32 + lane];
      }
      if (m >= m_count) continue;
      EpiIn e = in[r];
      if constexpr (E == Epilogue::kQkvRope) e.c = s_epi[r][m][g].x, e.s = s_epi[r][m][g].y;
      if constexpr (E == Epilogue::kAddResidual) e.r0 = s_epi[r][m][g].x, e.r1 = s_epi[r][m][g].y;
      write_pair<T, E>(a, m, row0[r], row1[r], row0[r] < a.N, row1[r] < a.N, y0, y1, e);
    }
  }
}

// Warps per CTA for one tile a CTA, 4 to 16: more while each warp still has more chunks than its
// preload and the grid stays within 16 warps per SM (a 2048-row down projection has 128 tiles: 16
// warps; a gate/up projection of 1024 tiles keeps 4, several CTAs per SM streaming for longer).
// A CTA of several tiles keeps them (mma_row_tiles).
inline int mma_warps(int num_tiles, int num_chunks) {
  int w = 4;
  while (w < 16 && w * kMmaPreload < num_chunks && num_tiles * 2 * w <= 16 * num_sms()) w *= 2;
  return w;
}

template <typename T, Epilogue E>
int mma_tiles(const GemvArgs<T>& a) {
  if constexpr (E == Epilogue::kSiluMul) return a.N / 2 / 8;
  if constexpr (E == Epilogue::kQkvRope) return a.N / kMmaRows;
  return (a.N + kMmaRows - 1) / kMmaRows;
}

// Row tiles per CTA for `tiles` tiles at NT column tiles, whose warps split K as `warps` do for one
// tile (so every RT sums in the same order: bit-equal): up to kMmaMaxRowTiles while the grid keeps
// at least a CTA per SM, where RT divides the tile count (no CTA past the matrix) and its CTA can
// have that many warps; 1 above 16 tokens (NT = 4: the accumulators would not fit).
// VGRAPH_MMA_RT=1, 2 or 4 replaces the rule, whatever the grid (comparisons; read at each launch,
// so a graph keeps what it was captured with), still halved until the other conditions hold.
constexpr int kMmaMaxRowTiles = 4;
inline int mma_row_tiles(int tiles, int nt, int warps) {
  const int forced = env_int("VGRAPH_MMA_RT", 0, 0, kMmaMaxRowTiles);  // 0: the rule
  TORCH_CHECK(forced != 3, "VGRAPH_MMA_RT must be an integer in [0, 4] other than 3, got 3");
  if (nt > 2) return 1;
  int rt = forced > 0 ? forced : kMmaMaxRowTiles;
  while (rt > 1 && (tiles % rt != 0 || warps > (rt == 4 ? kMmaMaxWarps<4> : kMmaMaxWarps<2>) ||
                    (forced == 0 && tiles / rt < num_sms()))) {
    rt /= 2;
  }
  return rt;
}

template <typename T, int NT, int RT, Epilogue E>
void launch_mma_nt(const GemvArgs<T>& a, int ctas, int warps, cudaStream_t stream) {
  constexpr bool kNorm = has_norm(E);
  const size_t smem = static_cast<size_t>(warps) * RT * NT * 4 * 32 * sizeof(float) +
                      (kNorm ? static_cast<size_t>(a.K) * sizeof(T) : 0);
  if (smem > 40 * 1024) {  // near the 48 KiB default (static smem counts too): opt in
    C10_CUDA_CHECK(cudaFuncSetAttribute(gemv_mma_kernel<T, NT, RT, E>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
  }
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg =
      pdl::launch_config(dim3(ctas), dim3(warps * 32), smem, stream, attr);
  C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, gemv_mma_kernel<T, NT, RT, E>, a));
}

// The grid and CTA of one tile a CTA (mma_warps), then the row tiles a CTA takes (mma_row_tiles).
template <typename T, int NT, Epilogue E>
void launch_mma_rt(const GemvArgs<T>& a, cudaStream_t stream) {
  const int tiles = mma_tiles<T, E>(a), warps = mma_warps(tiles, a.K / kMmaK);
  if constexpr (NT <= 2) {
    const int rt = mma_row_tiles(tiles, NT, warps);
    if (rt == 4) return launch_mma_nt<T, NT, 4, E>(a, tiles / 4, warps, stream);
    if (rt == 2) return launch_mma_nt<T, NT, 2, E>(a, tiles / 2, warps, stream);
  }
  launch_mma_nt<T, NT, 1, E>(a, tiles, warps, stream);
}

template <typename T, Epilogue E>
void launch_gemv_mma(const GemvArgs<T>& a, cudaStream_t stream) {
  int m = a.num_tokens;
  // VGRAPH_MMA_NT=1, 2 or 4 (comparisons only: what the column tiles cost apart from the tokens)
  // launches at least that many; read at each launch, so a graph keeps what it was captured with.
  const char* nt = std::getenv("VGRAPH_MMA_NT");
  if (nt != nullptr && nt[0] != '\0') m = std::max(m, 8 * std::atoi(nt) - 7);
  if (m <= 8) return launch_mma_rt<T, 1, E>(a, stream);
  if (m <= 16) return launch_mma_rt<T, 2, E>(a, stream);
  launch_mma_rt<T, 4, E>(a, stream);
}

}  // namespace gemv
}  // namespace vgraph
