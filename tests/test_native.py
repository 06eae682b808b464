"""The compiled ReLU decode kernel (icrl_gym/models/native.py) against slow references, its cache and fallbacks."""

import copy
import hashlib
import json
import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from agents.learned.transformer import TransformerAgent
from icrl_gym.envs import BernoulliBanditEnv
from icrl_gym.models import native, native_build
from icrl_gym.models.kv_cache import KVCache
from icrl_gym.models.native import LanesKVCache
from icrl_gym.models.transformer import BanditTransformer, TransformerConfig
from tests.helpers import play_steps
from tests.reliability.commands_round import HALF_WRITING_COMPILER

needs_compiler = pytest.mark.skipif(native_build.find_compiler() is None, reason="no C compiler")


@pytest.fixture(scope="module")
def kernel():
    if native_build.find_compiler() is None:
        pytest.skip("no C compiler")
    return native_build.build()


def reference(q, k, v, n):
    """Slow loop: y[b, h, i] = sum_{j <= n-m+i} ReLU(<q[b, h, i], k[b, h, j]>) v[b, h, j], float64."""
    B, nh, m, hs = q.shape
    y = torch.zeros(B, nh, m, hs, dtype=torch.float64)
    for b in range(B):
        for h in range(nh):
            for i in range(m):
                for j in range(n - m + i + 1):
                    w = max(float(q[b, h, i].double() @ k[b, h, j].double()), 0.0)
                    y[b, h, i] += w * v[b, h, j].double()
    return y


def to_lanes(x, lane):
    """(B, nh, t, hs) -> (ceil(B/lane), nh, t, hs, lane), zero-padded."""
    nb = -(-x.shape[0] // lane)
    x = torch.cat([x, x.new_zeros(nb * lane - x.shape[0], *x.shape[1:])])
    return x.view(nb, lane, *x.shape[1:]).permute(0, 2, 3, 4, 1).contiguous()


def from_lanes(x, B):
    return x.permute(0, 4, 1, 2, 3).flatten(0, 1)[:B]


@pytest.mark.parametrize("B, hs, m, n, cap", [(3, 8, 2, 7, 9), (17, 8, 1, 5, 5), (5, 5, 3, 6, 8), (2, 16, 2, 2, 4)])
def test_kernel_matches_slow_loop(kernel, B, hs, m, n, cap):
    g = torch.Generator().manual_seed(B * 100 + hs)
    nh = 2
    q = torch.randn(B, nh, m, hs, generator=g)
    k = torch.randn(B, nh, cap, hs, generator=g)
    v = torch.randn(B, nh, cap, hs, generator=g)
    y = kernel(to_lanes(q, kernel.lane), to_lanes(k, kernel.lane), to_lanes(v, kernel.lane), n)
    expected = reference(q, k, v, n)
    assert expected.abs().max() > 0.5
    torch.testing.assert_close(from_lanes(y, B).double(), expected, atol=1e-5, rtol=1e-5)
    assert (y.permute(0, 4, 1, 2, 3).flatten(0, 1)[B:] == 0).all()  # padding trajectories stay zero


def test_kernel_threads_give_identical_results(kernel):
    g = torch.Generator().manual_seed(0)
    q, k, v = (to_lanes(torch.randn(70, 4, t, 8, generator=g), kernel.lane) for t in (2, 30, 30))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = kernel(q, k, v, 25)
        torch.set_num_threads(2)
        two = kernel(q, k, v, 25, out=torch.empty_like(q))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)


def arm_reference(qkv, n_heads, mask):
    """Slow loop, float64: y[b, i, h] = sum_j softmax_j(<q_bih, k_bjh> / sqrt(dh)) v_bjh over the real arms j."""
    n, k, width = qkv.shape
    dh = width // (3 * n_heads)
    x = qkv.double().view(n, k, 3, n_heads, dh)
    y = torch.zeros(n, k, n_heads, dh, dtype=torch.float64)
    for b in range(n):
        real = [j for j in range(k) if mask is None or bool(mask[b, j])]
        for i in range(k):
            for h in range(n_heads):
                scores = [float(x[b, i, 0, h] @ x[b, j, 1, h]) / dh**0.5 for j in real]
                top = max(scores)
                weights = [np.exp(s_ - top) for s_ in scores]
                for w, j in zip(weights, real, strict=True):
                    y[b, i, h] += w / sum(weights) * x[b, j, 2, h]
    return y.view(n, k, n_heads * dh)


@pytest.mark.parametrize("n, k, heads, dh", [(3, 5, 4, 8), (2, 1, 2, 8), (4, 7, 2, 5), (2, 20, 1, 16), (1, 50, 4, 8)])
@pytest.mark.parametrize("masked", [False, True])
def test_arm_attention_matches_slow_loop(kernel, n, k, heads, dh, masked):
    """Every head size (8 and 16 specialised, 5 general), one arm to fifty, with and without padded arms."""
    g = torch.Generator().manual_seed(n * 1000 + k * 10 + dh)
    qkv = 2 * torch.randn(n, k, 3 * heads * dh, generator=g)
    mask = None
    if masked:
        mask = torch.rand(n, k, generator=g) < 0.7
        mask[:, 0] = True  # every row keeps a real arm
    y = kernel.arm_attention(qkv, heads, mask)
    expected = arm_reference(qkv, heads, mask)
    assert expected.abs().max() > 0.5
    torch.testing.assert_close(y.double(), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(native_build.arm_attention_reference(qkv.double(), heads, mask), expected)


def test_arm_attention_threads_give_identical_results(kernel):
    qkv = torch.randn(300, 6, 96, generator=torch.Generator().manual_seed(1))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = kernel.arm_attention(qkv, 4)
        torch.set_num_threads(2)
        two = kernel.arm_attention(qkv, 4)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)


def test_arm_attention_rejects_bad_input(kernel):
    qkv = torch.zeros(2, 3, 24)
    with pytest.raises(ValueError, match="with 5 heads"):
        kernel.arm_attention(qkv, 5)
    with pytest.raises(ValueError, match="mask"):
        kernel.arm_attention(qkv, 2, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="qkv must be contiguous float32"):
        kernel.arm_attention(qkv.double(), 2)
    with pytest.raises(ValueError, match="qkv must be contiguous float32"):
        kernel.arm_attention(torch.zeros(2, 6, 24)[:, ::2], 2)
    with pytest.raises(ValueError, match="mask must be contiguous bool"):
        kernel.arm_attention(qkv, 2, torch.ones(2, 3))


@needs_compiler
@pytest.mark.parametrize("masked", [False, True])
def test_arm_self_attention_plays_the_same_with_and_without_the_kernel(monkeypatch, masked):
    """A rollout (no gradient) takes the kernel, training the PyTorch path; both give the same tokens and logits."""
    from icrl_gym.models import generalist
    from icrl_gym.models.generalist import ArmSelfAttention, GeneralistConfig, GeneralistTransformer

    torch.manual_seed(0)
    layer = ArmSelfAttention(GeneralistConfig(d_model=32, n_heads=4))
    arms = torch.randn(6, 2, 5, 32)
    mask = (torch.rand(6, 5) < 0.7) | (torch.arange(5) == 0) if masked else None
    calls = []
    real = generalist.native_kernels
    monkeypatch.setattr(generalist, "native_kernels", lambda: calls.append(1) or real())
    with torch.no_grad():
        fast = layer(arms, mask)
    assert calls  # the kernel was asked for
    slow_grad = layer(arms, mask)  # the weights ask for a gradient: the PyTorch path
    assert len(calls) == 1 and slow_grad.requires_grad
    torch.testing.assert_close(fast, slow_grad.detach(), atol=1e-6, rtol=1e-5)
    model = GeneralistTransformer(GeneralistConfig(d_model=32, n_heads=4, n_layers=2)).eval()
    counts = torch.randint(0, 6, (50, 5, 2)).float()
    with torch.no_grad():
        with_kernel = model.decide_counts(counts, counts.sum(1), 40, 100)
        monkeypatch.setattr(generalist, "native_kernels", lambda: None)
        without = model.decide_counts(counts, counts.sum(1), 40, 100)
    torch.testing.assert_close(with_kernel, without, atol=1e-5, rtol=1e-5)


def test_kernel_rejects_bad_input(kernel):
    lane = kernel.lane
    q, k = torch.zeros(1, 2, 2, 8, lane), torch.zeros(1, 2, 6, 8, lane)
    with pytest.raises(ValueError, match="n=7"):
        kernel(q, k, k, 7)  # more keys than slots
    with pytest.raises(ValueError, match="q must be contiguous float32"):
        kernel(q.double(), k, k, 4)
    with pytest.raises(ValueError, match="k must be contiguous float32"):
        kernel(q, torch.zeros(1, 2, 12, 8, lane)[:, :, ::2], k, 4)
    with pytest.raises(ValueError, match="out has shape"):
        kernel(q, k, k, 4, out=torch.zeros(1, 2, 1, 8, lane))


def rollout_logits(model, cache, sets, actions, rewards):
    """Logits (B, T, A) of a cached rollout along the given trajectory."""
    logits = []
    for t in range(sets.shape[1]):
        prev = (None, None) if t == 0 else (actions[:, t - 1], rewards[:, t - 1])
        logits.append(model.step(cache, sets[:, t], *prev).logits)
    return torch.stack(logits, 1)


def random_trajectory(B, T=9, A=4, d=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    sets = torch.rand(B, T, A, d, generator=g) * 2 - 1
    return sets, torch.randint(0, A, (B, T), generator=g), torch.randn(B, T, generator=g)


@needs_compiler
@pytest.mark.parametrize("B", [1, 16, 19])
@pytest.mark.parametrize("layout", ["paper", "compact"])
def test_native_rollout_matches_torch_path_and_forward(B, layout):
    torch.manual_seed(0)
    cfg = TransformerConfig(n_layer=2, n_head=2, n_embd=16, num_actions=4, dim=3, horizon=9, layout=layout)
    model = BanditTransformer(cfg).eval()
    sets, actions, rewards = random_trajectory(B)
    with torch.no_grad():
        full = model(sets, actions, rewards)[0]
    out = {}
    for cls in (LanesKVCache, KVCache):
        cache = cls.allocate(B, cfg, cfg.max_tokens, "cpu", torch.float32)
        assert type(cache) is cls and cache.batch_size == B and cache.capacity == cfg.max_tokens
        out[cls] = rollout_logits(model, cache, sets, actions, rewards)
    assert type(model.new_cache(B, model.env_info())) is LanesKVCache  # the choice where the kernel applies and works
    torch.testing.assert_close(out[LanesKVCache], out[KVCache], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[LanesKVCache], full, atol=1e-5, rtol=1e-5)


def small(**kw):
    return BanditTransformer(TransformerConfig(n_layer=1, n_head=2, n_embd=8, num_actions=3, dim=2, horizon=4, **kw))


def test_native_is_refused_where_it_does_not_apply():
    model = small(attention="softmax")
    with pytest.raises(ValueError, match="needs ReLU attention"):
        LanesKVCache.allocate(2, model.config, 8, "cpu", torch.float32)
    with pytest.raises(ValueError, match="needs ReLU attention"):
        LanesKVCache.allocate(2, small().config, 8, "cpu", torch.float64)
    assert type(model.new_cache(2, model.env_info())) is KVCache
    double = small().double()
    assert type(double.new_cache(2, double.env_info())) is KVCache


@needs_compiler
def test_operator_passes_opcheck_and_matches_the_reference():
    """``torch.ops.icrl_gym.relu_decode``: schema, fake tensor and AOT checks; kernel and fallback agree."""
    g = torch.Generator().manual_seed(3)
    lane = native.native_kernels().lane
    q, k, v = (torch.randn(2, 2, t, 8, lane, generator=g) for t in (2, 6, 6))
    out = torch.empty_like(q)
    torch.ops.icrl_gym.relu_decode(q, k, v, 5, out)
    torch.testing.assert_close(out, native.relu_decode_reference(q, k, v, 5), atol=1e-5, rtol=1e-5)
    for dtype in (torch.float32, torch.float64):  # float64 runs the PyTorch fallback inside the operator
        args = tuple(x.to(dtype) for x in (q, k, v)) + (5, out.to(dtype))
        result = torch.library.opcheck(torch.ops.icrl_gym.relu_decode.default, args)
        assert set(result.values()) == {"SUCCESS"}, result


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty library cache folder and a kernel that is looked up again."""
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path))
    native.native_kernels.cache_clear()
    yield tmp_path
    native.native_kernels.cache_clear()


def kernel_and_warnings():
    """``native_kernels()`` and the messages of the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = native.native_kernels()
    return kernel, [str(w.message) for w in caught]


def test_disabled_by_environment(fresh, monkeypatch):
    monkeypatch.setenv(native.DISABLE_ENV, "0")
    assert native.native_kernels() is None
    assert list(fresh.iterdir()) == []  # nothing compiled
    model = small()
    assert type(model.new_cache(2, model.env_info())) is KVCache
    with pytest.raises(ValueError, match="unavailable"):
        LanesKVCache.allocate(2, model.config, 8, "cpu", torch.float32)


def test_failing_compiler_falls_back_with_one_warning(fresh, monkeypatch):
    monkeypatch.setenv("CC", "false")
    with pytest.raises(RuntimeError, match="could not build") as err:
        native_build.build()
    assert "false -O3 -march=native" in str(err.value) and str(err.value).count("exit 1") == len(native_build.FLAG_SETS)
    kernel, messages = kernel_and_warnings()
    assert kernel is None and len(messages) == 1 and "PyTorch path" in messages[0] and "exit 1" in messages[0]
    assert type(small().new_cache(2, small().env_info())) is KVCache


def test_missing_compiler_is_named(fresh, monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(fresh))  # no cc, gcc or clang
    with pytest.raises(RuntimeError, match="no C compiler found"):
        native_build.build()


def first_library(folder):
    """Where the preferred flag set's library is kept in ``folder``."""
    return next(iter(native_build.library_paths(native_build.find_compiler(), folder).values()))


def unusable_file_as_folder(folder):
    target = folder / "file"
    target.write_text("not a folder")
    return target


def unusable_below_a_file(folder):
    return unusable_file_as_folder(folder) / "cache"


def unusable_folder_as_library(folder):
    first_library(folder).mkdir()
    return folder


@needs_compiler
@pytest.mark.parametrize("make", [unusable_file_as_folder, unusable_below_a_file, unusable_folder_as_library])
def test_unusable_cache_folder_compiles_for_the_process_with_one_warning(fresh, monkeypatch, make):
    """A file for the folder, a folder below a file, a folder where the library goes: one warning, kernel works."""
    monkeypatch.setenv(native.CACHE_ENV, str(make(fresh)))
    kernel, messages = kernel_and_warnings()
    assert kernel is not None and len(messages) == 1, messages
    assert "cache" in messages[0] and "unusable" in messages[0] and "Error" in messages[0]  # the OSError's class
    native_build.self_test(kernel)


@needs_compiler
def test_read_only_cache_folder_compiles_for_the_process_with_one_warning(fresh, monkeypatch):
    """Simulated by the writer (chmod does not stop root, who runs CI containers)."""

    def refuse(path, data):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(native_build, "atomic_write_bytes", refuse)
    kernel, messages = kernel_and_warnings()
    assert kernel is not None and len(messages) == 1 and "PermissionError" in messages[0]
    assert list(fresh.iterdir()) == []


GARBAGE = """
int icrl_relu_decode_lane(void) { return 16; }
void icrl_relu_decode(const float *q, const float *K, const float *V, float *y, long n_blocks, long n_head,
                      long cap, long n, long hs, long m, int n_threads) {
    for (long i = 0; i < n_blocks * n_head * m * hs * 16; ++i) y[i] = 1.0f;
}
void icrl_arm_attention(const float *qkv, const unsigned char *mask, float *y, long n, long k, long h, long dh,
                        float denom, int n_threads) {
    for (long i = 0; i < n * k * h * dh; ++i) y[i] = 1.0f;
}
"""


@needs_compiler
def test_library_computing_garbage_is_not_used(fresh, monkeypatch):
    """A foreign library with the kernel's symbols and a matching sidecar fails the self-test: warning, PyTorch path."""
    source = fresh / "garbage.c"
    source.write_text(GARBAGE)
    monkeypatch.setattr(native_build, "SOURCE", source)
    cc = native_build.find_compiler()
    monkeypatch.setattr(native_build, "library_paths", lambda cc_, folder: {("-O3",): folder / "relu_decode-x.so"})
    native_build.store(fresh / "relu_decode-x.so", native_build._compile(cc, ("-O3",)))
    kernel, messages = kernel_and_warnings()
    assert kernel is None and len(messages) == 1 and "failed their self-test" in messages[0]
    assert type(small().new_cache(2, small().env_info())) is KVCache


BUILD = "from icrl_gym.models import native_build as nb; k = nb.build(); nb.self_test(k); print(k.path, k.lane)"


def build_in_subprocess(folder):
    """Build in a fresh process (a process keeps a loaded library mapped, whatever happens to the file)."""
    env = {**os.environ, native.CACHE_ENV: str(folder)}
    done = subprocess.run([sys.executable, "-c", BUILD], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.split()[0])


def half_library(folder):
    """The first half of the library the system compiler builds, as a file in ``folder``."""
    data = native_build._compile(native_build.find_compiler(), ("-O3",))
    path = folder / "half.so"
    path.write_bytes(data[: len(data) // 2])
    return path


@needs_compiler
def test_a_compiler_that_writes_half_a_library_and_exits_0_is_caught_in_a_child(fresh, monkeypatch, tmp_path_factory):
    """Loading half a library kills the process (SIGBUS): the child that tries it dies, nothing is stored or loaded."""
    bin_dir = tmp_path_factory.mktemp("bin")
    compiler = bin_dir / "cc"
    compiler.write_text(HALF_WRITING_COMPILER.format(half=half_library(bin_dir)))
    compiler.chmod(0o755)
    monkeypatch.setenv("CC", str(compiler))
    assert native_build.load_problem((bin_dir / "half.so").read_bytes()) is not None
    kernel, messages = kernel_and_warnings()
    assert kernel is None and len(messages) == 1 and "PyTorch path" in messages[0], messages
    assert messages[0].count("the compiler reported success") == len(native_build.FLAG_SETS)
    assert "neither stored nor loaded" in messages[0]
    assert list(fresh.iterdir()) == []  # nothing stored, so the next process is not poisoned either
    assert type(small().new_cache(2, small().env_info())) is KVCache


@needs_compiler
def test_a_sound_library_passes_the_load_check():
    assert native_build.load_problem(native_build._compile(native_build.find_compiler(), ("-O3",))) is None
    assert "file too short" in native_build.load_problem(b"\x7fELF")


@needs_compiler
def test_a_half_library_an_earlier_version_stored_with_its_checksum_is_rebuilt(tmp_path):
    """The sidecar without the load-check mark (as written before the check existed) is not trusted."""
    half = half_library(tmp_path).read_bytes()
    lib = first_library(tmp_path)
    lib.write_bytes(half)
    native_build.sidecar(lib).write_bytes(hashlib.sha256(half).hexdigest().encode() + b"\n")
    assert native_build.read_verified(lib) is None
    assert build_in_subprocess(tmp_path) == lib  # the process lives: rebuilt, checked, stored
    assert lib.read_bytes() != half and native_build.read_verified(lib) == lib.read_bytes()


@needs_compiler
def test_library_is_reused_and_a_corrupt_one_rebuilt(tmp_path):
    lib = build_in_subprocess(tmp_path)
    assert lib.parent == tmp_path and lib.name.startswith("icrl_kernels-")
    size, mtime = lib.stat().st_size, lib.stat().st_mtime_ns
    assert native_build.read_verified(lib) == lib.read_bytes()  # the sidecar holds its hash
    assert build_in_subprocess(tmp_path) == lib and lib.stat().st_mtime_ns == mtime  # reused, not rebuilt
    lib.write_bytes(lib.read_bytes()[:100])  # a torn file: loading it would kill the process (SIGBUS)
    assert build_in_subprocess(tmp_path) == lib and lib.stat().st_size == size  # rebuilt over
    native_build.sidecar(lib).unlink()  # a library without its hash is not trusted either
    mtime = lib.stat().st_mtime_ns
    assert build_in_subprocess(tmp_path) == lib and lib.stat().st_mtime_ns > mtime
    assert native_build.read_verified(lib) is not None
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # atomic: no temporary left


FUZZ_WORKER = """
import functools, json, random, sys, warnings
from pathlib import Path
import torch
from icrl_gym.models import native, native_build

folder, seed, count = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
native_build._compile = functools.cache(native_build._compile)  # the real compiler, once per flag set
stored = []
store = native_build.store
native_build.store = lambda path, data: (stored.append(path), store(path, data))
rng = random.Random(seed)
g = torch.Generator().manual_seed(seed)
counts = {"rebuilt": 0, "fell_back": 0, "wrong": 0, "reused": 0}
kernel = native_build.build(folder)
lib = kernel.path
for i in range(count):
    target = lib if rng.random() < 0.8 else native_build.sidecar(lib)  # mostly the library, sometimes its hash
    corrupt = bytearray(target.read_bytes())
    if rng.random() < 0.5:
        del corrupt[rng.randrange(len(corrupt)) :]  # truncated at a random offset
    else:
        for _ in range(rng.randint(1, 8)):  # random byte flips
            corrupt[rng.randrange(len(corrupt))] ^= rng.randrange(1, 256)
    target.write_bytes(bytes(corrupt))
    native.native_kernels.cache_clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kernel = native.native_kernels()
    if kernel is None:
        counts["fell_back"] += 1
        continue
    counts["rebuilt" if stored else "reused"] += 1
    stored.clear()
    q, k, v = (torch.randn(2, 2, t, 8, kernel.lane, generator=g) for t in (2, 9, 9))
    y = kernel(q, k, v, 7)
    if not torch.allclose(y, native.relu_decode_reference(q, k, v, 7), atol=1e-4, rtol=1e-4):
        counts["wrong"] += 1
print(json.dumps(counts))
"""


def fuzz_library(folder, corruptions, per_process=100):
    """Corrupt the cached library (or its sidecar) ``corruptions`` times, then load: counts of every outcome.

    Each corruption is followed by a fresh kernel lookup, as a new process would make; batches of
    ``per_process`` share a process (safe because no unverified file is ever loaded).  A process
    that dies (a SIGBUS, say) counts all its corruptions as crashes.
    """
    env = {**os.environ, native.CACHE_ENV: str(folder)}
    totals = {"rebuilt": 0, "fell_back": 0, "wrong": 0, "reused": 0, "crashed": 0}
    for seed, start in enumerate(range(0, corruptions, per_process)):
        count = min(per_process, corruptions - start)
        cmd = [sys.executable, "-c", FUZZ_WORKER, str(folder), str(seed), str(count)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            totals["crashed"] += count
            continue
        for key, value in json.loads(done.stdout.splitlines()[-1]).items():
            totals[key] += value
    return totals


@needs_compiler
def test_fuzzed_library_never_crashes_nor_computes_wrong(tmp_path):
    totals = fuzz_library(tmp_path, 40)
    assert totals["crashed"] == 0 and totals["wrong"] == 0 and totals["fell_back"] == 0, totals
    assert totals["rebuilt"] == 40, totals  # every corruption was caught (a byte flip never leaves a file valid)


@pytest.mark.slow
@needs_compiler
def test_fuzzed_library_never_crashes_nor_computes_wrong_many(tmp_path):
    totals = fuzz_library(tmp_path, 240, per_process=80)
    print(f"kernel cache fuzz: {totals}")
    assert totals == {"rebuilt": 240, "fell_back": 0, "wrong": 0, "reused": 0, "crashed": 0}


@needs_compiler
@pytest.mark.parametrize(
    "duplicate", [copy.deepcopy, lambda agent: pickle.loads(pickle.dumps(agent))], ids=["deepcopy", "pickle"]
)
def test_agent_with_a_native_cache_can_be_copied_mid_episode(duplicate):
    """The copy holds the cache's tensors (no ctypes object) and, from the same RNG state, acts as the original."""
    torch.manual_seed(0)
    cfg = TransformerConfig(n_layer=2, n_head=2, n_embd=16, dim=3, num_actions=3, horizon=8)
    agent = TransformerAgent.from_model(BanditTransformer(cfg).eval(), seed=1)
    env = BernoulliBanditEnv(num_arms=3, horizon=8)
    obs, info = env.reset(seed=3)
    agent.reset(info)
    assert type(agent._cache) is LanesKVCache
    _, obs = play_steps(agent, env, 3, obs)
    twin, twin_env = duplicate(agent), copy.deepcopy(env)
    assert type(twin._cache) is LanesKVCache and twin._cache.steps == 3
    assert np.array_equal(twin.policy(obs), agent.policy(obs))
    assert play_steps(twin, twin_env, 5, obs)[0] == play_steps(agent, env, 5, obs)[0]


@needs_compiler
def test_cache_unpickled_without_the_kernel_runs_on_the_pytorch_fallback(monkeypatch):
    """The operator computes the lanes with PyTorch where no kernel is loaded (a process without a compiler)."""
    model = small().eval()
    sets, actions, rewards = random_trajectory(5, T=4, A=3, d=2)
    cache = model.new_cache(5, model.env_info())
    half = rollout_logits(model, cache, sets[:, :2], actions, rewards)
    twin = pickle.loads(pickle.dumps(cache))
    monkeypatch.setattr(native, "native_kernels", lambda: None)
    logits = [model.step(twin, sets[:, t], actions[:, t - 1], rewards[:, t - 1]).logits for t in (2, 3)]
    with torch.no_grad():
        full = model(sets, actions, rewards)[0]
    torch.testing.assert_close(torch.cat([half, torch.stack(logits, 1)], 1), full, atol=1e-5, rtol=1e-5)
