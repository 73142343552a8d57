// The standalone CUDA tools' error check (tools/*.cu): CUDA_CHECK(call, status) runs a CUDA
// runtime call and, where it fails, prints the file, line and CUDA's message on stdout and exits
// with `status` (each tool says what its statuses mean).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CUDA_CHECK(x, status)                                                 \
  do {                                                                        \
    cudaError_t e = (x);                                                      \
    if (e != cudaSuccess) {                                                   \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e));   \
      std::exit(status);                                                      \
    }                                                                         \
  } while (0)
