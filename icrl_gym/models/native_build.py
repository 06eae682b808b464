"""Building the compiled CPU kernels of :mod:`icrl_gym.models.native`: compile, cache, check, load.

The source is compiled with the system C compiler (``$CC``, else ``cc``, ``gcc`` or
``clang``) the first time a process needs it, into ``$ICRL_GYM_NATIVE_CACHE`` (default
``$XDG_CACHE_HOME/icrl_gym`` or ``~/.cache/icrl_gym``) under a name that hashes the source, the
flags, the compiler and the processor, beside a sidecar holding the SHA-256 of the library.  Before
it is loaded a library is checked:

* a freshly compiled library is first loaded, and its entry points called, in a child process
  (:func:`load_problem`): a compiler that exits 0 after writing half a library leaves a file whose
  loading kills the process (SIGBUS), so only a library the child loaded and ran is stored or
  loaded here; one that fails is neither, and the next flag set is tried;
* its bytes must match the sidecar, which holds the SHA-256 of a library that passed that check
  (a truncated, torn or foreign file, or one stored without the check by an earlier version, is
  compiled again; loading a library truncated after it was stored could kill the process, so it
  is never attempted), and the process loads a private copy of exactly the bytes it verified;
* on first use in a process its outputs must equal :func:`relu_decode_reference` and
  :func:`arm_attention_reference` on small inputs.

Where the cache folder cannot be written (read-only, a file in its place, a folder where the
library should be), the library is compiled for this process only, in a private temporary folder,
with one warning naming the cause.  Where no compiler works (or none writes a library that loads),
the self-test fails, or with ``ICRL_GYM_NATIVE=0``, :func:`native_kernels` returns None (one
warning, naming the cause) and models use the PyTorch paths: the same functions, about half the
rollout speed.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from icrl_gym.models.kv_cache import future_mask
from icrl_gym.utils.fileio import atomic_write_bytes

DISABLE_ENV = "ICRL_GYM_NATIVE"
"""Set to ``0`` to use the PyTorch paths of both kernels (no compilation)."""
CACHE_ENV = "ICRL_GYM_NATIVE_CACHE"
"""Directory of the compiled library (default ``$XDG_CACHE_HOME/icrl_gym`` or ``~/.cache/icrl_gym``)."""
SOURCE = Path(__file__).with_name("kernels.c")
FLAG_SETS = (
    ("-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp"),
    ("-O3", "-march=native", "-fopenmp"),
    ("-O3", "-fopenmp"),
    ("-O3",),
)
"""Compiler flags, tried in order (the first two for GCC/Clang on x86; the last is portable, single-threaded)."""
COMPILE_TIMEOUT_S = 120
LOAD_CHECK_TIMEOUT_S = 60
"""Seconds the child process of :func:`load_problem` may take to load the library and call it."""
SELF_TEST_TOLERANCE = 1e-4
"""Largest relative error of the self-test against the float64 reference (float32 sums of ~10 terms: ~1e-6)."""

_lock = threading.Lock()


def readable(x: Tensor, dtype: torch.dtype = torch.float32) -> bool:
    """Whether the compiled kernels can read ``x`` as it is: ``dtype`` (float32 unless told), on the CPU, contiguous."""
    return x.dtype == dtype and x.device.type == "cpu" and x.is_contiguous()


@dataclass(frozen=True)
class NativeKernels:
    """The loaded library: ``icrl_relu_decode``, its lane width, and ``icrl_arm_attention``.

    The lane width is the number of trajectories per vector block of the decode kernel's layout.
    """

    function: Callable[..., None]
    lane: int
    arm_function: Callable[..., None]
    path: Path
    """Where the library is kept (the process loaded a private copy of its verified bytes)."""
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
            if not readable(x):
                raise ValueError(f"relu_decode: {name} must be contiguous float32 on the CPU, got {x.dtype} {x.device}")
        self.function(q.data_ptr(), k.data_ptr(), v.data_ptr(), y.data_ptr(), nb, nh, cap, n, hs, m, self.threads())
        return y

    def arm_attention(self, qkv: Tensor, n_heads: int, mask: Tensor | None = None) -> Tensor:
        """Softmax attention across the K arms of each of n rows: ``y`` (n, K, D) from ``qkv`` (n, K, 3D).

        ``qkv``'s last dimension holds each arm's query, key and value, each D = ``n_heads`` x dh wide
        and split into heads in that order (the output of one linear map D -> 3D);
        ``y[b, i, h] = sum_j softmax_j(<q_bih, k_bjh> / sqrt(dh)) v_bjh``, over the arms j with
        ``mask[b, j]`` (n, K) true, or every arm where ``mask`` is None.  ``qkv`` must be contiguous
        float32 on the CPU and ``mask`` (if given) contiguous bool there (checked).
        """
        n, k, width = qkv.shape
        if width % (3 * n_heads) or (mask is not None and mask.shape != (n, k)):
            mask_shape = None if mask is None else tuple(mask.shape)
            raise ValueError(f"arm_attention: qkv {tuple(qkv.shape)} with {n_heads} heads, mask {mask_shape}")
        if not readable(qkv):
            raise ValueError(f"arm_attention: qkv must be contiguous float32 on the CPU, got {qkv.dtype} {qkv.device}")
        if mask is not None and not readable(mask, torch.bool):
            raise ValueError(f"arm_attention: mask must be contiguous bool on the CPU, got {mask.dtype} {mask.device}")
        head = width // (3 * n_heads)
        y = qkv.new_empty(n, k, width // 3)
        mask_ptr = None if mask is None else mask.data_ptr()
        self.arm_function(qkv.data_ptr(), mask_ptr, y.data_ptr(), n, k, n_heads, head, math.sqrt(head), self.threads())
        return y

    def takes(self, *tensors: Tensor) -> bool:
        """Whether ``tensors`` are laid out for this kernel: contiguous float32 on the CPU, lanes of its width."""
        return all(x.shape[-1] == self.lane and readable(x) for x in tensors)

    def threads(self) -> int:
        """Threads of a call: torch's intra-op count where the library has OpenMP, else 1."""
        return torch.get_num_threads() if self.openmp else 1


def relu_decode_reference(q: Tensor, k: Tensor, v: Tensor, n: int) -> Tensor:
    """What the kernel computes, with PyTorch ops, in the lanes layout and ``q``'s dtype.

    ``y[b, h, i, :, l] = sum_{j <= n-m+i} ReLU(<q[b, h, i, :, l], k[b, h, j, :, l]>) v[b, h, j, :, l]``
    for ``q`` (nb, nh, m, hs, L) and ``k``, ``v`` (nb, nh, cap, hs, L).
    """
    m = q.shape[2]
    keys, values = k[:, :, :n].to(q.dtype), v[:, :, :n].to(q.dtype)
    scores = torch.einsum("bhidl,bhjdl->bhijl", q, keys).relu()
    scores = scores.masked_fill(future_mask(n - m, m, q.device)[None, None, :, :, None], 0.0)
    return torch.einsum("bhijl,bhjdl->bhidl", scores, values)


def arm_attention_reference(qkv: Tensor, n_heads: int, mask: Tensor | None = None) -> Tensor:
    """What :meth:`NativeKernels.arm_attention` computes, with PyTorch ops in ``qkv``'s dtype (a slow, plain form)."""
    n, k, width = qkv.shape
    q, key, v = qkv.view(n, k, 3, n_heads, width // (3 * n_heads)).unbind(2)  # each (n, K, H, dh)
    scores = torch.einsum("nihd,njhd->nhij", q, key) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask.view(n, 1, 1, k), float("-inf"))
    return torch.einsum("nhij,njhd->nihd", scores.softmax(-1), v).reshape(n, k, width // 3)


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


@functools.cache
def _compiler_version(cc: str) -> str:
    """``cc --version``'s output (once per compiler and process: every artefact's provenance asks for it)."""
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout


def sidecar(path: Path) -> Path:
    """The file holding the SHA-256 (hex) of the library at ``path``."""
    return path.with_name(path.name + ".sha256")


def _compile(cc: str, flags: tuple[str, ...]) -> bytes | str:
    """The library compiled from :data:`SOURCE` with ``flags``, or the compiler's complaint (a str)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "lib.so"
        cmd = [cc, *flags, "-std=gnu99", "-shared", "-fPIC", "-o", str(out), str(SOURCE), "-lm"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"{' '.join(cmd)}: {exc}"
        if done.returncode != 0 or not out.is_file():
            return f"{' '.join(cmd)}: exit {done.returncode}: {done.stderr.strip()[-500:]}"
        return out.read_bytes()


def read_verified(path: Path) -> bytes | None:
    """The bytes of the library at ``path`` if they match its sidecar hash, else None (missing, unreadable, torn)."""
    try:
        data, recorded = path.read_bytes(), sidecar(path).read_bytes()
    except OSError:
        return None
    return data if recorded == _hash_line(data) else None


LOAD_CHECKED = b"load-checked"
"""The sidecar's mark that the library passed :func:`load_problem` before it was stored (a sidecar of an
earlier version, without it, is not trusted: its library is compiled and checked again)."""


def _hash_line(data: bytes) -> bytes:
    """The sidecar's exact content for library ``data``: its SHA-256 in hex, :data:`LOAD_CHECKED` and a newline."""
    return hashlib.sha256(data).hexdigest().encode() + b" " + LOAD_CHECKED + b"\n"


def store(path: Path, data: bytes) -> None:
    """Keep the library ``data`` at ``path``: the library first, then its sidecar, each written atomically.

    Called only for a library that passed :func:`load_problem`: the sidecar says so.  A reader that
    finds the library but an older or missing sidecar compiles again, so no order of concurrent
    writers lets an unverified file be loaded.  Raises OSError where the folder is unusable.
    """
    atomic_write_bytes(path, data)
    atomic_write_bytes(sidecar(path), _hash_line(data))


@contextlib.contextmanager
def _private_copy(data: bytes) -> Iterator[str]:
    """The library ``data`` in a private temporary file (its path), deleted when the block ends."""
    fd, tmp = tempfile.mkstemp(prefix="icrl_gym-relu_decode-", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        yield tmp
    finally:
        os.unlink(tmp)


LOAD_CHECK = """
import ctypes, sys
for runtime in sys.argv[2:]:
    try:
        ctypes.CDLL(runtime, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        pass
lib = ctypes.CDLL(sys.argv[1])
lib.icrl_relu_decode_lane.restype = ctypes.c_int
lane = lib.icrl_relu_decode_lane()
if not 1 <= lane <= 4096:
    sys.exit(f"icrl_relu_decode_lane() returned {lane}")
fn = lib.icrl_relu_decode
fn.restype = None
fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_long] * 6 + [ctypes.c_int]
for hs in (8, 5):
    q, k, v, y = ((ctypes.c_float * (hs * lane))() for _ in range(4))
    fn(q, k, v, y, 1, 1, 1, 1, hs, 1, 1)
arm = lib.icrl_arm_attention
arm.restype = None
arm.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long] * 4 + [ctypes.c_float, ctypes.c_int]
for hs in (8, 5):
    qkv, y = (ctypes.c_float * (6 * hs))(), (ctypes.c_float * (2 * hs))()
    arm(qkv, None, y, 1, 2, 1, hs, 1.0, 1)
print(lane)
"""
"""The child of :func:`load_problem`: load the OpenMP runtimes named after the library (as this process
has them loaded), then the library, and call its entry points on zeros (head sizes 8 and 5, each
kernel's specialised and general loops)."""


def _openmp_runtimes() -> list[str]:
    """The OpenMP runtimes this process has loaded (torch's ``libgomp``): the library resolves its own to them.

    Read from ``/proc/self/maps`` (Linux); elsewhere none, and the child's loader finds the system's.
    """
    try:
        with open("/proc/self/maps") as fh:
            paths = {fields[-1] for fields in map(str.split, fh) if len(fields) >= 6}  # the mapped file, if any
    except OSError:
        return []
    return sorted(p for p in paths if p.startswith("/") and Path(p).name.startswith(("libgomp", "libomp", "libiomp")))


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def load_problem(data: bytes) -> str | None:
    """Why the library ``data`` is unsafe to load here, found by loading and calling it in a child process first.

    None where the child loaded it and called its entry points.  A compiler that exits 0 after
    writing half a library (a full disk, a killed linker, a broken wrapper) leaves a file whose
    segments reach past its end: loading it kills the process with SIGBUS, which no exception
    handler can catch, so that process must be a child.
    """
    with _private_copy(data) as tmp:
        cmd = [sys.executable, "-I", "-c", LOAD_CHECK, tmp, *_openmp_runtimes()]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=LOAD_CHECK_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"could not be checked in a child process ({type(exc).__name__}: {exc})"
    if done.returncode < 0:
        return (
            f"killed the child process that loaded it ({_signal_name(-done.returncode)}): "
            f"a truncated or damaged library ({len(data):,} bytes)"
        )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return f"failed to load in a child process (exit {done.returncode}): {lines[-1] if lines else 'no message'}"
    return None


def _load(data: bytes, path: Path, openmp: bool) -> NativeKernels:
    """Load the library ``data`` from a private copy (OSError if it is not one, AttributeError if it lacks the kernel).

    The copy, deleted once loaded (the mapping stays), makes what is loaded exactly what was verified,
    whatever happens to the cached file meanwhile.  ``data`` must have passed :func:`load_problem`
    (directly, or as the verified bytes of a stored library).
    """
    with _private_copy(data) as tmp:
        lib = ctypes.CDLL(tmp)
    fn = lib.icrl_relu_decode
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_long] * 6 + [ctypes.c_int]
    lib.icrl_relu_decode_lane.restype = ctypes.c_int
    arm = lib.icrl_arm_attention
    arm.restype = None
    arm.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long] * 4 + [ctypes.c_float, ctypes.c_int]
    return NativeKernels(fn, int(lib.icrl_relu_decode_lane()), arm, path, openmp)


def library_paths(cc: str, directory: Path) -> dict[tuple[str, ...], Path]:
    """Where each flag set's library is kept in ``directory``: a name hashing (source, flags, compiler, processor)."""
    source, version, processor = SOURCE.read_bytes(), _compiler_version(cc), _processor()
    paths: dict[tuple[str, ...], Path] = {}
    for flags in FLAG_SETS:
        key = hashlib.sha256(b"\0".join([source, " ".join(flags).encode(), version.encode(), processor.encode()]))
        paths[flags] = directory / f"icrl_kernels-{key.hexdigest()[:16]}.so"
    return paths


def build(directory: Path | None = None) -> NativeKernels:
    """Compile (or reuse) and load the kernel; RuntimeError naming every attempt if none works.

    A library in ``directory`` under the hash of (source, flags, compiler, processor) whose bytes
    match its sidecar is loaded; any other file there is compiled again and replaced.  A freshly
    compiled library is loaded in a child process first (:func:`load_problem`): one that fails is
    neither stored nor loaded, and the next flag set is tried.  Where the library cannot be stored,
    the one compiled is used by this process only, after one warning naming the cause.
    """
    cc = find_compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set $CC, or install cc/gcc/clang)")
    directory = cache_dir() if directory is None else directory
    complaints = []
    for flags, path in library_paths(cc, directory).items():
        openmp = "-fopenmp" in flags
        data = read_verified(path)
        if data is not None:
            try:
                return _load(data, path, openmp)
            except (OSError, AttributeError) as exc:
                complaints.append(f"{path}: verified but not loadable ({exc}); compiling it again")
        compiled = _compile(cc, flags)
        if isinstance(compiled, str):
            complaints.append(compiled)
            continue
        problem = load_problem(compiled)
        if problem is not None:
            complaints.append(
                f"{cc} {' '.join(flags)}: the compiler reported success, but the library it wrote {problem}; "
                "neither stored nor loaded"
            )
            continue
        try:
            store(path, compiled)
            unstored = None
        except OSError as exc:
            unstored = f"{type(exc).__name__}: {exc}"
        try:
            kernel = _load(compiled, path, openmp)
        except (OSError, AttributeError) as exc:
            complaints.append(f"{' '.join(flags)}: compiled but not loadable: {exc}")
            continue
        if unstored is not None:
            warnings.warn(
                f"the native kernel cache {directory} is unusable ({unstored}); the kernel was compiled "
                f"for this process only (set ${CACHE_ENV} to a writable folder to keep it)",
                RuntimeWarning,
                stacklevel=3,
            )
        return kernel
    raise RuntimeError("could not build the native kernels:\n" + "\n".join(complaints))


def self_test(kernel: NativeKernels) -> None:
    """RuntimeError unless both kernels equal their PyTorch references (float64) on small random inputs.

    Head sizes 8 (a specialised loop of each kernel) and 5 (the general one).  The decode kernel: two
    blocks, three new queries after three cached tokens, into an output prefilled with NaN.  The arm
    attention: three rows of four arms, two heads, every arm and a mask that drops one or two.
    """
    g = torch.Generator().manual_seed(0)
    mask = torch.tensor([[True, True, True, True], [True, False, True, True], [False, True, True, False]])
    for hs in (8, 5):
        q, k, v = (torch.randn(2, 2, t, hs, kernel.lane, generator=g) for t in (3, 7, 7))
        out = torch.full_like(q, float("nan"))
        kernel(q, k, v, 6, out=out)
        checks = [("decode", out, relu_decode_reference(q.double(), k.double(), v.double(), 6))]
        qkv = torch.randn(3, 4, 3 * 2 * hs, generator=g)
        for rows in (None, mask):
            expected = arm_attention_reference(qkv.double(), 2, rows)
            checks.append(("arm attention", kernel.arm_attention(qkv, 2, rows), expected))
        for name, got, expected in checks:
            error = float((got.double() - expected).abs().max()) if bool(got.isfinite().all()) else float("inf")
            if not error <= SELF_TEST_TOLERANCE * max(1.0, float(expected.abs().max())):
                raise RuntimeError(
                    f"the native kernels {kernel.path} failed their self-test ({name}, head size {hs}: "
                    f"largest error {error:.3g} against the PyTorch reference)"
                )


def disabled() -> bool:
    """Whether ``$ICRL_GYM_NATIVE`` turns the kernel off (``0``, ``false``, ``no``, ``off``)."""
    return os.environ.get(DISABLE_ENV, "1").strip().lower() in ("0", "false", "no", "off")


def kernel_state() -> str:
    """Whether rollouts may use the compiled kernel here, and the compiler that builds it, for provenance.

    ``off (ICRL_GYM_NATIVE=0)``, ``on: <the compiler's version line>`` (its flags follow from the
    compiler and the processor, :data:`FLAG_SETS` in order), or ``on, no C compiler: the PyTorch
    path``.  Nothing is built, and the answer does not depend on whether a model has asked for the
    kernel yet, so every artefact of a run records the same.
    """
    if disabled():
        return f"off ({DISABLE_ENV}={os.environ[DISABLE_ENV]})"
    cc = find_compiler()
    if cc is None:
        return "on, no C compiler: the PyTorch path"
    version = _compiler_version(cc).partition("\n")[0].strip()
    return f"on: {version or 'a compiler without a version line'}"


@functools.cache
def native_kernels() -> NativeKernels | None:
    """The library's kernels, built and self-tested once per process.

    None where it cannot be (after one warning naming the cause) or with ``ICRL_GYM_NATIVE=0``.
    """
    if disabled():
        return None
    with _lock:
        try:
            kernel = build()
            self_test(kernel)
        except RuntimeError as exc:
            warnings.warn(f"{exc}; rollouts use the PyTorch path (slower)", RuntimeWarning, stacklevel=2)
            return None
        return kernel
