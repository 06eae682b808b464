"""The compiled ReLU decode kernel (icrl_gym/models/native.py) against slow references, and its fallbacks."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from icrl_gym.models import native
from icrl_gym.models.transformer import BanditTransformer, TransformerConfig

needs_compiler = pytest.mark.skipif(native.find_compiler() is None, reason="no C compiler")


@pytest.fixture(scope="module")
def kernel():
    if native.find_compiler() is None:
        pytest.skip("no C compiler")
    return native.build()


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


@needs_compiler
@pytest.mark.parametrize("B", [1, 16, 19])
@pytest.mark.parametrize("layout", ["paper", "compact"])
def test_native_rollout_matches_torch_path_and_forward(B, layout):
    torch.manual_seed(0)
    cfg = TransformerConfig(n_layer=2, n_head=2, n_embd=16, num_actions=4, dim=3, horizon=9, layout=layout)
    model = BanditTransformer(cfg).eval()
    g = torch.Generator().manual_seed(1)
    sets = torch.rand(B, 9, 4, 3, generator=g) * 2 - 1
    actions = torch.randint(0, 4, (B, 9), generator=g)
    rewards = torch.randn(B, 9, generator=g)
    with torch.no_grad():
        full = model(sets, actions, rewards)[0]
    out = {}
    for flag in (True, False):
        cache = model.new_cache(B, native=flag)
        assert cache.layout == ("lanes" if flag else "tokens")
        assert cache.batch_size == B and cache.capacity == model.config.max_tokens
        logits = []
        for t in range(9):
            prev = (None, None) if t == 0 else (actions[:, t - 1], rewards[:, t - 1])
            logits.append(model.step(cache, sets[:, t], *prev).logits)
        out[flag] = torch.stack(logits, 1)
    torch.testing.assert_close(out[True], out[False], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[True], full, atol=1e-5, rtol=1e-5)


def small(**kw):
    return BanditTransformer(TransformerConfig(n_layer=1, n_head=2, n_embd=8, num_actions=3, dim=2, horizon=4, **kw))


def test_native_is_refused_where_it_does_not_apply():
    model = small(attention="softmax")
    with pytest.raises(ValueError, match="needs ReLU attention"):
        model.new_cache(2, native=True)
    assert model.new_cache(2).layout == "tokens"
    assert small().new_cache(2, dtype=torch.float64).layout == "tokens"


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty library cache folder and a kernel that is looked up again."""
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path))
    native.relu_decode_kernel.cache_clear()
    yield tmp_path
    native.relu_decode_kernel.cache_clear()


def test_disabled_by_environment(fresh, monkeypatch):
    monkeypatch.setenv(native.DISABLE_ENV, "0")
    assert native.relu_decode_kernel() is None
    assert list(fresh.iterdir()) == []  # nothing compiled
    model = small()
    assert model.new_cache(2).layout == "tokens"
    with pytest.raises(ValueError, match="unavailable"):
        model.new_cache(2, native=True)


def test_failing_compiler_falls_back_with_a_warning(fresh, monkeypatch):
    monkeypatch.setenv("CC", "false")
    with pytest.raises(RuntimeError, match="could not build") as err:
        native.build()
    assert "false -O3 -march=native" in str(err.value) and str(err.value).count("exit 1") == len(native.FLAG_SETS)
    with pytest.warns(RuntimeWarning, match="PyTorch path"):
        assert native.relu_decode_kernel() is None
    model = small()
    assert model.new_cache(2).layout == "tokens"


def test_missing_compiler_is_named(fresh, monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(fresh))  # no cc, gcc or clang
    with pytest.raises(RuntimeError, match="no C compiler found"):
        native.build()


BUILD = "from icrl_gym.models import native; k = native.build(); print(k.path, k.lane)"


def build_in_subprocess(folder):
    """Build in a fresh process (a process keeps a loaded library mapped, whatever happens to the file)."""
    env = {**os.environ, native.CACHE_ENV: str(folder)}
    done = subprocess.run([sys.executable, "-c", BUILD], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.split()[0])


@needs_compiler
def test_library_is_reused_and_a_corrupt_one_rebuilt(tmp_path):
    lib = build_in_subprocess(tmp_path)
    assert lib.parent == tmp_path and lib.name.startswith("relu_decode-")
    size, mtime = lib.stat().st_size, lib.stat().st_mtime_ns
    assert build_in_subprocess(tmp_path) == lib and lib.stat().st_mtime_ns == mtime  # reused, not rebuilt
    lib.write_bytes(lib.read_bytes()[:100])  # a torn file
    assert build_in_subprocess(tmp_path) == lib and lib.stat().st_size == size  # rebuilt over
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # atomic: no temporary left
