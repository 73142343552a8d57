"""Optional kernels the graphs may call by op name, each with a decomposition into standard ONNX
ops that runs everywhere. None are used yet: every graph cellspec exports is standard ONNX."""
