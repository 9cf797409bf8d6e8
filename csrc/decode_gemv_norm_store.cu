// The GEMV kernel with the kNormStore epilogue (decode_gemv.cuh), for float16 and bfloat16.
#include "decode_gemv.cuh"

namespace vgraph {
namespace gemv {
VGRAPH_INSTANTIATE_GEMV(Epilogue::kNormStore)
}  // namespace gemv
}  // namespace vgraph
