"""Install PyTorch (a test dependency of the Python package) as lightly as works.

Usage: python tools/install_torch.py REQUIREMENT      (e.g. torch==2.15.0)
Run with the virtual environment's interpreter.

PyPI's Linux torch wheel is a CUDA build: its full dependency set is about
5 GB (cuDNN, cuBLAS, NCCL, Triton, ...), none of which runs on a machine
without an NVIDIA GPU. But the wheel's libraries link against the CUDA
libraries, so `import torch` needs them to be loadable. So:

1. install torch with --no-deps and its plain Python requirements;
2. import it in a subprocess; when the import names a library it cannot load
   (not found, or too old: an undefined symbol), install only the wheel that
   ships that library, pinned as torch pins it, and try again. Libraries the
   machine already has (a CUDA toolkit in /usr/local, say) are used as they are;
3. if that does not converge, install torch with all its dependencies.

The import check runs with the same dlopen flags as Python's (RTLD_NOW), so a
successful import means every symbol resolved.
"""
import importlib.metadata
import os
import re
import subprocess
import sys

# Prefixes of the libraries (or of their symbols) and what ships them. The
# cuda-toolkit extras are how torch's CUDA 13 wheels name their CUDA libraries;
# the nvidia-* names are torch's own direct requirements.
LIBRARIES = [
    ("libcusparseLt", "cusparseLt", "nvidia-cusparselt"),
    ("libcudnn", "cudnn", "nvidia-cudnn"),
    ("libnccl", "nccl", "nvidia-nccl"),
    ("libnvshmem", "nvshmem", "nvidia-nvshmem"),
    ("libcufile", "cuFile", "cuda-toolkit[cufile]"),
    ("libcublasLt", "cublasLt", "cuda-toolkit[cublas]"),
    ("libcublas", "cublas", "cuda-toolkit[cublas]"),
    ("libcufft", "cufft", "cuda-toolkit[cufft]"),
    ("libcusolver", "cusolver", "cuda-toolkit[cusolver]"),
    ("libcusparse", "cusparse", "cuda-toolkit[cusparse]"),
    ("libnvJitLink", "nvJitLink", "cuda-toolkit[nvjitlink]"),
    ("libnvrtc", "nvrtc", "cuda-toolkit[nvrtc]"),
    ("libcupti", "cupti", "cuda-toolkit[cupti]"),
    ("libnvToolsExt", "nvtx", "cuda-toolkit[nvtx]"),
    ("libcudart", "cuda", "cuda-toolkit[cudart]"),
]
CUDA_NAMES = re.compile(r"^(nvidia-|cuda-|triton)", re.IGNORECASE)
# Downloaded wheels are kept here (setup_python.sh says why); "off" downloads every time.
WHEELHOUSE = os.environ.get("FLASHCL_WHEELHOUSE") or os.path.expanduser("~/.cache/flashcl-wheels")


def _pip(command, *args):
    # Quiet unless it fails: with torch's CUDA requirements left out on
    # purpose, pip reports them as conflicts on every install.
    r = subprocess.run([sys.executable, "-m", "pip", command, "-q", "--disable-pip-version-check", *args],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"install_torch: pip {command} {' '.join(args)} failed:\n{r.stdout}{r.stderr}")


def pip(*args):
    """pip install args, through the wheelhouse: download what it lacks, install from it."""
    if WHEELHOUSE == "off":
        _pip("install", *args)
        return
    _pip("download", "-d", WHEELHOUSE, *args)
    _pip("install", "--no-index", "--find-links", WHEELHOUSE, *args)


def import_error():
    """'' when torch imports and runs a CPU op, else the error's last line."""
    probe = "import torch; torch.ones(2).sum()"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    if r.returncode == 0:
        return ""
    lines = [line for line in r.stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {r.returncode}"


def torch_requirements():
    """torch's requirements, split into plain Python ones and the CUDA ones by name."""
    plain, cuda = [], {}
    for req in importlib.metadata.requires("torch") or []:
        spec, _, marker = req.partition(";")
        if "extra ==" in marker:
            continue
        name = re.split(r"[<>=~!\[ ]", spec.strip(), maxsplit=1)[0]
        if CUDA_NAMES.match(name):
            cuda[name.lower()] = spec.strip()
        else:
            plain.append(req)
    return plain, cuda


def wheel_for(error, cuda):
    """The requirement that ships the library an import error is about, or None."""
    # The loader's "libX.so.N: cannot open shared object file", or torch's own
    # preloader's "libX.so.*[0-9] not found in the system path".
    missing = re.search(r"(lib[A-Za-z0-9_+-]+)\.so\S*:? (?:cannot open shared object|not found)", error)
    symbol = re.search(r"undefined symbol: (\w+)", error)
    for lib, sym, ships in LIBRARIES:
        if (missing and missing.group(1).startswith(lib)) or (symbol and symbol.group(1).startswith(sym)):
            if ships.startswith("cuda-toolkit["):
                pinned = cuda.get("cuda-toolkit", "cuda-toolkit")
                extra = ships[len("cuda-toolkit"):]
                return re.sub(r"^cuda-toolkit(\[[^\]]*\])?", "cuda-toolkit" + extra, pinned)
            for name, spec in cuda.items():
                if name.startswith(ships):
                    return spec
    return None


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    want = sys.argv[1].strip()
    if not import_error() and importlib.metadata.version("torch") == want.partition("==")[2]:
        print(f"install_torch: {want} already imports")
        return
    pip("--no-deps", want)
    plain, cuda = torch_requirements()
    pip(*plain)
    installed = []
    for _ in range(len(LIBRARIES)):
        error = import_error()
        if not error:
            print(f"install_torch: {want} imports (--no-deps, plus: {', '.join(installed) or 'nothing'})")
            return
        wheel = wheel_for(error, cuda)
        if wheel is None or wheel in installed:
            break
        # Only the library's own wheel: its dependencies are more CUDA libraries,
        # which the next round installs if the import still needs them.
        pip("--no-deps", wheel) if not wheel.startswith("cuda-toolkit[") else pip(wheel)
        installed.append(wheel)
    print(f"install_torch: the light install did not import ({error}); installing {want} with all its dependencies")
    pip(want)
    error = import_error()
    if error:
        sys.exit(f"install_torch: torch does not import: {error}")


if __name__ == "__main__":
    main()
