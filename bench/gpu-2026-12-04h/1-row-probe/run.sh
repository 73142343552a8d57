nvcc -std=c++17 -O3 -arch=sm_90 tools/row_matmul_probe.cu -o /tmp/row_probe && /tmp/row_probe
