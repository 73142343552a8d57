"""tools/bench_spec.py with ONNX Runtime's global thread pool shared by every session and left
spinning (SHARED=1), or as it is (SHARED=0). Run from the checkout's root:

    SHARED=1 python - --artifact DIR --batches 1 ... < bench/cpu-2026-12-02e/shared_wrap.py
"""

import os
import runpy
import sys

sys.path.insert(0, "tools")
if os.environ.get("SHARED") == "1":
    import onnxruntime as ort
    from onnxruntime.capi import _pybind_state

    from cellspec.runtime import ort_cpu

    _pybind_state.set_global_thread_pool_sizes(2, 1)

    class Shared(ort.SessionOptions):
        def __init__(self) -> None:
            super().__init__()
            self.use_per_session_threads = False

    ort.SessionOptions = Shared
    per_session = ort_cpu.OrtCpuEngine.__init__

    def spinning_init(self, path, threads, spinning=False) -> None:
        per_session(self, path, threads, True)

    ort_cpu.OrtCpuEngine.__init__ = spinning_init
sys.argv = ["bench_spec.py"] + sys.argv[1:]
runpy.run_path("tools/bench_spec.py", run_name="__main__")
