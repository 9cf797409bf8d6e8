// The GEMV kernel with the kQkvRope epilogue (decode_gemv.cuh), for float16 and bfloat16.
#include "decode_gemv.cuh"

namespace vgraph {
namespace gemv {
VGRAPH_INSTANTIATE_GEMV(Epilogue::kQkvRope)
}  // namespace gemv
}  // namespace vgraph
