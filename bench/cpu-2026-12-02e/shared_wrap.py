# run tools/bench_spec.py with ONNX Runtime's global thread pool shared by every session (SHARED=1)
import os, sys, runpy
sys.path.insert(0, "tools")
if os.environ.get("SHARED") == "1":
    import onnxruntime as ort
    from onnxruntime.capi import _pybind_state as C
    C.set_global_thread_pool_sizes(2, 1)
    Base = ort.SessionOptions
    class Shared(Base):
        def __init__(self):
            super().__init__()
            self.use_per_session_threads = False
    ort.SessionOptions = Shared
    from cellspec.runtime import ort_cpu
    orig = ort_cpu.OrtCpuEngine.__init__
    def init(self, path, threads, spinning=False):
        orig(self, path, threads, True)
    ort_cpu.OrtCpuEngine.__init__ = init
sys.argv = ["bench_spec.py"] + sys.argv[1:]
runpy.run_path("tools/bench_spec.py", run_name="__main__")
