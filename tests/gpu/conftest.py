"""GPU tests run on a machine with a CUDA device, onnxruntime-gpu and PyCUDA; elsewhere they
are skipped with the reason. Artifacts are exported on that machine from the bundled GGUF."""

import pytest

from cellspec.export import ExportConfig, export


def cuda_missing() -> str | None:
    """Why ort-cuda cannot run here, or None."""
    try:
        import onnxruntime as ort
        import pycuda.driver  # noqa: F401
    except ImportError as error:
        return f"ort-cuda needs onnxruntime-gpu and pycuda ({error})"
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return f"onnxruntime {ort.__version__} has no CUDA provider"
    return None


def pytest_collection_modifyitems(config, items):
    reason = cuda_missing()
    for item in items:
        if "gpu" in item.keywords and reason:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def smollm2_by_dtype(smollm2_gguf, tmp_path_factory):
    """dtype -> SmolLM2 artifact exported in that dtype (once per dtype)."""
    made = {}

    def get(dtype: str):
        if dtype not in made:
            out = tmp_path_factory.mktemp(f"smollm2-{dtype}") / "artifact"
            export(smollm2_gguf, out, ExportConfig(dtype=dtype, max_context=1024,
                                                   max_cells=4096), progress=False)
            made[dtype] = out
        return made[dtype]

    return get


@pytest.fixture(scope="session")
def cell_library():
    """cellspec's CellAttention library, built here if it is not yet, or the test skipped with
    what is missing (nvcc, ONNX Runtime's headers)."""
    from cellspec.plugins.build import PluginUnavailable, build_library

    try:
        return build_library()
    except PluginUnavailable as missing:
        pytest.skip(f"CellAttention cannot be built here: {missing}")
