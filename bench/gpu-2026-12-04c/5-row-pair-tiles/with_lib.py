"""tools/gpu_bench.py with the plugin library at $LIB (a variant build) when LIB is set."""
import os
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))
if os.environ.get("LIB"):
    import cellspec.plugins.build as build

    build.build_library = lambda *a, **k: Path(os.environ["LIB"])
sys.argv = ["tools/gpu_bench.py", *sys.argv[1:]]
runpy.run_path("tools/gpu_bench.py", run_name="__main__")
