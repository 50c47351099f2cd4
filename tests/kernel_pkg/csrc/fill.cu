#include "common.cuh"
__global__ void fill_kernel(float* out, float value, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = value;
}
SGL_API int sgl_fill(float* out, float value, int64_t n, void* stream) {
  if (n <= 0) return 0;
  fill_kernel<<<launch_blocks(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(out, value, n);
  return static_cast<int>(cudaGetLastError());
}
