// A C ABI for ctypes: raw device pointers, an element count and a cudaStream_t; returns cudaError_t.
#pragma once
#include <cstdint>
#include <cuda_runtime.h>
#include <tinydep/axpy.cuh>
#define SGL_API extern "C" __attribute__((visibility("default")))
inline int launch_blocks(int64_t n) { return static_cast<int>((n + 255) / 256); }
