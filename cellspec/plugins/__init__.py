"""Optional kernels the graphs may call by op name, each with a decomposition into standard ONNX
ops that runs everywhere. `cell_attention.cu`: the CellAttention ops `ort-cuda` rewrites
attention into (cellspec/rewrite/) when `build.py` can compile it; artifacts themselves stay
standard ONNX."""
