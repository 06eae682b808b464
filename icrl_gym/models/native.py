"""The compiled CPU kernel of the cached ReLU-attention decode step, built on first use.

A cached decode step of :class:`~icrl_gym.models.transformer.BanditTransformer` attends each new
query to every cached key: ``y_i = sum_{j<=i} ReLU(<q_i, k_j>) v_j`` (Definition 1, with the ``1/i``
and ``1/sqrt(hs)`` factors folded into ``q``).  With PyTorch that is two batched matrix products
per layer over ``B * n_head`` tiny matrices (``hs = 8`` rows in the paper model), whose per-matrix
overhead makes them run at a fraction of the memory bandwidth.  ``relu_decode.c`` does the whole
step in one pass over the keys and values, vectorised across trajectories (the cache's ``"lanes"``
layout, :class:`~icrl_gym.models.transformer.KVCache`); on the 2-core CPU of this project a cached
rollout of the paper model runs about 2x as fast as on the PyTorch path, and 2.6x / 2.3x the
code before issue 15 on 1 / 2 threads (``python -m benchmarks.speed.training_speed --parts rollout``).

The source is compiled with the system C compiler (``$CC``, else ``cc``, ``gcc`` or ``clang``) the
first time a process needs it, into ``$ICRL_GYM_NATIVE_CACHE`` (default
``$XDG_CACHE_HOME/icrl_gym`` or ``~/.cache/icrl_gym``) under a name that hashes the source, the
flags, the compiler and the processor, and loaded with :mod:`ctypes`.  Where no compiler works, or
with ``ICRL_GYM_NATIVE=0``, :func:`relu_decode_kernel` returns None (with one warning) and the
model uses its PyTorch path: the same function, about half the rollout speed.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from icrl_gym.fileio import atomic_write_bytes

DISABLE_ENV = "ICRL_GYM_NATIVE"
"""Set to ``0`` to use the PyTorch decode path (no compilation)."""
CACHE_ENV = "ICRL_GYM_NATIVE_CACHE"
"""Directory of the compiled library (default ``$XDG_CACHE_HOME/icrl_gym`` or ``~/.cache/icrl_gym``)."""
SOURCE = Path(__file__).with_name("relu_decode.c")
FLAG_SETS = (
    ("-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp"),
    ("-O3", "-march=native", "-fopenmp"),
    ("-O3", "-fopenmp"),
    ("-O3",),
)
"""Compiler flags, tried in order (the first two for GCC/Clang on x86; the last is portable, single-threaded)."""
COMPILE_TIMEOUT_S = 120

_lock = threading.Lock()


@dataclass(frozen=True)
class ReluDecodeKernel:
    """The loaded ``icrl_relu_decode`` and its lane width (trajectories per vector block)."""

    function: Callable[..., None]
    lane: int
    path: Path
    openmp: bool
    """Built with ``-fopenmp``: the library then runs on PyTorch's own OpenMP threads (``libgomp.so.1``
    is loaded by torch before it, and the loader reuses a loaded library of that name), so the
    kernel's threads do not compete with torch's spinning workers as a separate pool would."""

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, n: int, out: Tensor | None = None) -> Tensor:
        """``y`` (nb, nh, m, hs, lane) from ``q`` (nb, nh, m, hs, lane) and caches ``k``, ``v`` (nb, nh, cap, hs, lane).

        Keys ``0 .. n-1`` are read, the ``m`` new ones last; query ``i`` meets keys ``0 .. n-m+i``.
        All tensors are contiguous float32 on the CPU (checked); ``out`` (like ``q``) receives ``y``
        if given.  The blocks are split across :meth:`threads` threads.
        """
        nb, nh, m, hs, lane = q.shape
        cap = k.shape[2]
        if lane != self.lane or k.shape != (nb, nh, cap, hs, lane) or v.shape != k.shape or not m <= n <= cap:
            raise ValueError(f"relu_decode: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, n={n}")
        y = torch.empty_like(q) if out is None else out
        if y.shape != q.shape:
            raise ValueError(f"relu_decode: out has shape {tuple(y.shape)}, expected {tuple(q.shape)}")
        for name, x in (("q", q), ("k", k), ("v", v), ("out", y)):
            if x.dtype != torch.float32 or x.device.type != "cpu" or not x.is_contiguous():
                raise ValueError(f"relu_decode: {name} must be contiguous float32 on the CPU, got {x.dtype} {x.device}")
        self.function(q.data_ptr(), k.data_ptr(), v.data_ptr(), y.data_ptr(), nb, nh, cap, n, hs, m, self.threads())
        return y

    def threads(self) -> int:
        """Threads of a call: torch's intra-op count where the library has OpenMP, else 1."""
        return torch.get_num_threads() if self.openmp else 1


def cache_dir() -> Path:
    """Where compiled libraries are kept: ``$ICRL_GYM_NATIVE_CACHE``, else the user's cache folder."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "icrl_gym"


def find_compiler() -> str | None:
    """``$CC`` if set, else the first of ``cc``, ``gcc``, ``clang`` on the PATH."""
    if os.environ.get("CC"):
        return os.environ["CC"]
    return next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)


def _processor() -> str:
    """What ``-march=native`` depends on: the machine and, on Linux, the CPU's model and flags."""
    text = platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            lines = [line for line in fh if line.startswith(("model name", "flags", "Features"))]
        text += "".join(sorted(set(lines)))
    except OSError:
        text += platform.processor()
    return text


def _compiler_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout


def _compile(cc: str, flags: tuple[str, ...], target: Path) -> str | None:
    """Compile :data:`SOURCE` into ``target`` (written atomically); None on success, else the compiler's complaint."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "lib.so"
        cmd = [cc, *flags, "-std=gnu99", "-shared", "-fPIC", "-o", str(out), str(SOURCE)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"{' '.join(cmd)}: {exc}"
        if done.returncode != 0 or not out.exists():
            return f"{' '.join(cmd)}: exit {done.returncode}: {done.stderr.strip()[-500:]}"
        atomic_write_bytes(target, out.read_bytes())
    return None


def _load(path: Path, openmp: bool) -> ReluDecodeKernel:
    """Load a compiled library (OSError if it is not one, AttributeError if it lacks the kernel)."""
    lib = ctypes.CDLL(str(path))
    fn = lib.icrl_relu_decode
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_long] * 6 + [ctypes.c_int]
    lib.icrl_relu_decode_lane.restype = ctypes.c_int
    return ReluDecodeKernel(fn, int(lib.icrl_relu_decode_lane()), path, openmp)


def build(directory: Path | None = None) -> ReluDecodeKernel:
    """Compile (or reuse) and load the kernel; RuntimeError naming every attempt if none works.

    A library already in ``directory`` under the hash of (source, flags, compiler, processor) is
    loaded; one that fails to load (a truncated or foreign file) is rebuilt over.
    """
    cc = find_compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set $CC, or install cc/gcc/clang)")
    directory = cache_dir() if directory is None else directory
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        directory = Path(tempfile.mkdtemp(prefix="icrl_gym-native-"))  # read-only home: this process only
    source, version, processor = SOURCE.read_bytes(), _compiler_version(cc), _processor()
    complaints = []
    for flags in FLAG_SETS:
        key = hashlib.sha256(b"\0".join([source, " ".join(flags).encode(), version.encode(), processor.encode()]))
        path = directory / f"relu_decode-{key.hexdigest()[:16]}.so"
        if path.exists():
            try:
                return _load(path, "-fopenmp" in flags)
            except (OSError, AttributeError):
                pass  # corrupt or truncated: compile it again
        complaint = _compile(cc, flags, path)
        if complaint is None:
            try:
                return _load(path, "-fopenmp" in flags)
            except (OSError, AttributeError) as exc:
                complaint = f"{path}: {exc}"
        complaints.append(complaint)
    raise RuntimeError("could not build the native decode kernel:\n" + "\n".join(complaints))


@functools.cache
def relu_decode_kernel() -> ReluDecodeKernel | None:
    """The kernel, built once per process; None where it cannot be (after one warning) or with ``ICRL_GYM_NATIVE=0``."""
    if os.environ.get(DISABLE_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    with _lock:
        try:
            return build()
        except RuntimeError as exc:
            warnings.warn(f"{exc}; rollouts use the PyTorch path (slower)", RuntimeWarning, stacklevel=2)
            return None
