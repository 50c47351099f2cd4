// The configure-time dependency of the test package (served as a FetchContent tarball).
#pragma once
namespace tinydep {
__device__ __forceinline__ float axpy(float alpha, float x, float y) { return alpha * x + y; }
}  // namespace tinydep
