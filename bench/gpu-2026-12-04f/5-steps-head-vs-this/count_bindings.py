"""Run tools/gpu_bench.py with its arguments, counting the IOBindings made (a thrash check)."""
import runpy
import sys

sys.path.insert(0, ".")
from cellspec.runtime import device_engine as d  # noqa: E402

made = [0]
init = d._Binding.__init__


def counting(self, session):
    made[0] += 1
    init(self, session)


d._Binding.__init__ = counting
sys.argv = ["tools/gpu_bench.py", *sys.argv[1:]]
try:
    runpy.run_path("tools/gpu_bench.py", run_name="__main__")
finally:
    print("bindings made", made[0], flush=True)
