#include "common.cuh"
__global__ void relu_kernel(float* out, const float* x, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
SGL_API int sgl_relu(float* out, const float* x, int64_t n, void* stream) {
  if (n <= 0) return 0;
  relu_kernel<<<launch_blocks(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(out, x, n);
  return static_cast<int>(cudaGetLastError());
}
