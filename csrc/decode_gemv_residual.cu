// The GEMV kernel with the kAddResidual epilogue (decode_gemv.cuh), for float16 and bfloat16.
#include "decode_gemv.cuh"

namespace vgraph {
namespace gemv {
VGRAPH_INSTANTIATE_GEMV(Epilogue::kAddResidual)
}  // namespace gemv
}  // namespace vgraph
