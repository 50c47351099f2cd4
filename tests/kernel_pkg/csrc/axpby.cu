#include "common.cuh"
__global__ void axpby_kernel(float* y, const float* x, float a, float b, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = tinydep::axpy(a, x[i], b * y[i]);
}
SGL_API int sgl_axpby(float* y, const float* x, float a, float b, int64_t n, void* stream) {
  if (n <= 0) return 0;
  axpby_kernel<<<launch_blocks(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(y, x, a, b, n);
  return static_cast<int>(cudaGetLastError());
}
