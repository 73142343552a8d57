"""cellspec's CUDA custom-op library (`cell_attention.cu`): compiled with nvcc once per source
into `$CELLSPEC_CACHE/plugins/` (for the GPU it is built on), and loaded by `ort-cuda` sessions
whose graphs call its ops. What the build needs beyond the `gpu` extra: nvcc (the CUDA
toolkit) and ONNX Runtime's C/C++ API headers (`onnxruntime_cxx_api.h`, e.g. Debian's
`libonnxruntime-dev`, or the `include` folder of an onnxruntime release), found through
`$CELLSPEC_ORT_INCLUDE` or the usual include folders. The headers' API version must not be newer
than the onnxruntime-gpu that loads the library.

`python -m cellspec.plugins.build` builds it and prints its path.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cellspec.errors import CellspecError

SOURCE = Path(__file__).with_name("cell_attention.cu")
HEADERS = ("cell_attention_mma.cuh",)  # included by SOURCE: a change to one is a new build too
HEADER = "onnxruntime_cxx_api.h"
INCLUDE_FOLDERS = ("/usr/include/onnxruntime", "/usr/local/include/onnxruntime",
                   "/usr/include", "/usr/local/include")
BUILD_SECONDS = 600


class PluginUnavailable(CellspecError):
    """The library is not built and cannot be: the message says what is missing."""


def ort_include() -> Path:
    """The folder holding ONNX Runtime's C++ API header."""
    given = os.environ.get("CELLSPEC_ORT_INCLUDE")
    folders = [given] if given else list(INCLUDE_FOLDERS)
    for folder in folders:
        if (Path(folder) / HEADER).is_file():
            return Path(folder)
    where = f"$CELLSPEC_ORT_INCLUDE={given}" if given else ", ".join(INCLUDE_FOLDERS)
    raise PluginUnavailable(f"ONNX Runtime's C++ API header {HEADER} is not in {where}: "
                            "install libonnxruntime-dev or set CELLSPEC_ORT_INCLUDE")


def check_api_version(include: Path) -> None:
    """Refuse headers of a newer C API than the installed onnxruntime serves: the library would
    ask it for an API it does not have (`GetApi` returns null) and fail at its first call."""
    header = include / "onnxruntime_c_api.h"
    match = re.search(r"^#define ORT_API_VERSION (\d+)", header.read_text(errors="replace"),
                      re.MULTILINE) if header.is_file() else None
    if match is None:
        return  # no version to compare (not a release's headers): the build decides
    import onnxruntime

    served = int(onnxruntime.__version__.split(".")[1])  # 1.N serves C API versions 1..N
    if int(match.group(1)) > served:
        raise PluginUnavailable(
            f"ONNX Runtime's headers in {include} are C API version {match.group(1)}, newer "
            f"than the installed onnxruntime {onnxruntime.__version__} serves ({served}): "
            f"point CELLSPEC_ORT_INCLUDE at the include folder of onnxruntime {served} or "
            "older")


def nvcc() -> str:
    home = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
    found = shutil.which("nvcc") or (str(home) if home.is_file() else None)
    if found is None:
        raise PluginUnavailable("nvcc (the CUDA toolkit) is not on PATH nor in $CUDA_HOME/bin")
    return found


def plugin_folder() -> Path:
    from cellspec.model_cache import cache_root

    return cache_root() / "plugins"


def source_digest() -> str:
    digest = hashlib.sha256(SOURCE.read_bytes())
    for name in HEADERS:
        header = SOURCE.with_name(name)
        if header.is_file():
            digest.update(header.read_bytes())
    return digest.hexdigest()[:16]


def compute_capability() -> str | None:
    """The first GPU's compute capability as nvidia-smi reports it ("9.0"), or None where it
    cannot say."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    return lines[0] if done.returncode == 0 and lines else None


WGMMA_DEFINE = "-DCELLSPEC_WGMMA=1"  # what tells the source it is built with row_wgmma_kernel


def arch_flags(capability: str | None) -> list[str]:
    """nvcc's target for this machine's GPU: -arch=native, or with CELLSPEC_CUDA_WGMMA=1 in the
    environment on a GPU of compute capability 9.0 (H100, H200), sm_90a, the architecture-specific
    code that has Hopper's warpgroup MMA, with CELLSPEC_WGMMA defined so that the source has
    row_wgmma_kernel for prompts (run where CELLSPEC_ROW_WIDE=g). Opt-in: on an H100 it gives
    row_wide_kernel's bits and is 1.12-1.20x slower (bench/NOTES.md, 2026-12-06, seventh
    sitting)."""
    if capability == "9.0" and wgmma_asked():
        return ["-gencode", "arch=compute_90a,code=sm_90a", WGMMA_DEFINE]
    return ["-arch=native"]


def wgmma_asked() -> bool:
    return os.environ.get("CELLSPEC_CUDA_WGMMA") == "1"


def library_path(include: Path, compiler: str, flags: list[str]) -> Path:
    """Where the build of this source with these headers, this compiler and these target flags
    lives (a build with row_wgmma_kernel named so: `-wgmma.so`)."""
    toolchain = hashlib.sha256(compiler.encode())
    header = include / "onnxruntime_c_api.h"
    toolchain.update(header.read_bytes() if header.is_file() else b"")
    toolchain.update(" ".join(flags).encode())
    kind = "-wgmma" if WGMMA_DEFINE in flags else ""
    return plugin_folder() / (f"libcellspec_cuda-{source_digest()}-{toolchain.hexdigest()[:8]}"
                              f"{kind}.so")


def cached(wgmma: bool) -> Path | None:
    """A build of this source in the cache, with row_wgmma_kernel or without."""
    builds = sorted(plugin_folder().glob(f"libcellspec_cuda-{source_digest()}-*.so"))
    found = [path for path in builds if path.name.endswith("-wgmma.so") == wgmma]
    return found[-1] if found else None


def build_library(force: bool = False, progress: bool = True) -> Path:
    """The library's path: a build of this source already in the cache (headers and nvcc are
    then not needed), else compiled now (a minute or so; with `progress`, one stderr line counts
    the seconds). With CELLSPEC_CUDA_WGMMA=1 on an H100 or H200 (arch_flags), the build with
    row_wgmma_kernel."""
    flags = ["-arch=native"]
    if wgmma_asked():
        found = None if force else cached(True)
        if found:
            return found
        flags = arch_flags(compute_capability())  # asked, but not a Hopper GPU: the plain build
    if not force and WGMMA_DEFINE not in flags:
        found = cached(False)
        if found:
            return found
    from cellspec.export.progress import stage  # only for a build: it imports the exporter

    include, compiler = ort_include(), nvcc()
    check_api_version(include)
    target = library_path(include, compiler, flags)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        made = Path(scratch) / target.name
        command = [compiler, "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC",
                   *flags, f"-I{include}", str(SOURCE), "-o", str(made)]
        try:
            with stage(f"building cellspec's CUDA kernels ({SOURCE.name}, once per source)",
                       enabled=progress):
                subprocess.run(command, check=True, capture_output=True, text=True,
                               timeout=BUILD_SECONDS)
        except subprocess.CalledProcessError as failed:
            message = f"nvcc failed to build {SOURCE.name}:\n{failed.stderr}"
            raise PluginUnavailable(message) from None
        except subprocess.TimeoutExpired:
            message = f"nvcc did not build {SOURCE.name} in {BUILD_SECONDS} s"
            raise PluginUnavailable(message) from None
        os.replace(made, target)  # atomic: a concurrent build finds a whole library or none
    return target


def main() -> int:
    try:
        print(build_library(force="--force" in sys.argv[1:]))
    except PluginUnavailable as missing:
        print(f"cellspec: {missing}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
