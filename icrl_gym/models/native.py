"""The compiled CPU kernels of two attention steps of a rollout, and the cache laid out for the first.

*The cached ReLU-attention decode step.*  A cached decode step of
:class:`~icrl_gym.models.transformer.BanditTransformer` attends each new
query to every cached key: ``y_i = sum_{j<=i} ReLU(<q_i, k_j>) v_j`` (Definition 1, with the ``1/i``
and ``1/sqrt(hs)`` factors folded into ``q``).  With PyTorch that is two batched matrix products
per layer over ``B * n_head`` tiny matrices (``hs = 8`` rows in the paper model), whose per-matrix
overhead makes them run at a fraction of the memory bandwidth.  ``kernels.c`` does the whole
step in one pass over the keys and values, vectorised across trajectories: :class:`LanesKVCache`
interleaves ``L`` trajectories innermost (the "lanes" layout).  On the 2-core CPU of this project
a cached rollout of the paper model runs about 2x as fast as on the PyTorch path
(``python -m benchmarks.speed.training_speed --parts rollout``).  :func:`new_kv_cache` is the one place
that chooses: a :class:`LanesKVCache` where the kernel applies and works, else the PyTorch path's
:class:`~icrl_gym.models.kv_cache.KVCache`.

The kernel is the PyTorch operator ``torch.ops.icrl_gym.relu_decode`` (:func:`relu_decode`), which
calls the library through :mod:`ctypes`; a cache therefore holds only tensors, and can be copied
and pickled.

*Softmax attention across the arms.*  The generalists' :class:`~icrl_gym.models.generalist.ArmSelfAttention`
attends each of a step's K arm tokens to the others, again as batched products of tiny matrices
(K x dh per run and head); the same library computes it row by row from the arms' stacked queries,
keys and values (:meth:`~icrl_gym.models.native_build.NativeKernels.arm_attention`), where no gradient
is asked for and the tensor is :func:`readable` as it is.

The library's build, caching and checks are :mod:`icrl_gym.models.native_build`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from icrl_gym.models.kv_cache import Attention, DecoderSizes, KVCache
from icrl_gym.models.native_build import (
    CACHE_ENV,
    DISABLE_ENV,
    NativeKernels,
    native_kernels,
    readable,
    relu_decode_reference,
)

__all__ = [
    "CACHE_ENV",
    "DISABLE_ENV",
    "LanesKVCache",
    "NativeKernels",
    "kernel_applies",
    "readable",
    "new_kv_cache",
    "relu_decode",
    "native_kernels",
    "relu_decode_reference",
]


def _relu_decode(q: Tensor, k: Tensor, v: Tensor, n: int, out: Tensor) -> None:
    """The implementation of :data:`relu_decode`: the kernel where it takes these tensors, else the reference."""
    kernel = native_kernels()
    if kernel is not None and kernel.takes(q, k, v, out):
        kernel(q, k, v, n, out=out)
    else:
        out.copy_(relu_decode_reference(q, k, v, n))


def _relu_decode_fake(q: Tensor, k: Tensor, v: Tensor, n: int, out: Tensor) -> None:
    """Nothing to compute for shape propagation (``torch.compile``, meta tensors): the operator only writes ``out``."""


_LIBRARY = torch.library.Library("icrl_gym", "DEF")
_LIBRARY.define("relu_decode(Tensor q, Tensor k, Tensor v, int n, Tensor(a!) out) -> ()")
_LIBRARY.impl("relu_decode", _relu_decode, "CompositeExplicitAutograd")
torch.library.register_fake("icrl_gym::relu_decode", _relu_decode_fake, lib=_LIBRARY)
relu_decode = torch.ops.icrl_gym.relu_decode.default
"""``torch.ops.icrl_gym.relu_decode(q, k, v, n, out)``: the cached ReLU attention of ``q`` against
keys/values ``0 .. n-1``, written into ``out`` (lanes layout, shapes as in :meth:`NativeKernels.__call__`).

The compiled kernel where it is loaded and takes these tensors (contiguous float32 on the CPU, its
lane width), else :func:`relu_decode_reference` (e.g. for a cache unpickled in a process without a
compiler).  Defined with ``torch.library.Library`` rather than ``torch.library.custom_op``: the
latter's Python wrapper cost about 13% of the rollout speed at 50 runs (one call per layer and
step), the plain definition about 2% (within the noise)."""


def kernel_applies(config: DecoderSizes, device: torch.device | str, dtype: torch.dtype) -> bool:
    """Whether the compiled kernel computes this decoder's attention: ReLU attention, float32, on a CPU."""
    return config.attention is Attention.RELU and torch.device(device).type == "cpu" and dtype == torch.float32


@dataclass
class LanesKVCache(KVCache):
    """A :class:`KVCache` laid out for the compiled kernel: ``L`` trajectories interleaved innermost.

    ``k[l]`` and ``v[l]`` are ``(ceil(B/L), nh, max_tokens, hs, L)`` with ``L`` the kernel's vector
    width, so that every multiply-add of the kernel is one vector instruction across ``L``
    trajectories and a (block, head) reads its keys and values as one contiguous stream.  The
    padding trajectories of the last block stay zero and are never returned.  A decode step keeps
    the queries and outputs, in lanes, in the two halves of :meth:`workspace`; it is zero-filled
    when allocated, so that the padding lanes of the queries start as zeros rather than arbitrary
    bits (possibly denormals, slow to compute with), and afterwards hold only finite values of
    earlier steps, which the lane-wise kernel never mixes into real runs.
    """

    @classmethod
    def buffer_shape(cls, batch_size: int, n_head: int, head_size: int, max_tokens: int) -> tuple[int, ...]:
        """``(ceil(B/L), nh, max_tokens, hs, L)``; ValueError where the kernel is unavailable."""
        kernel = native_kernels()
        if kernel is None:
            raise ValueError(f"the native decode kernel is unavailable (see the warning above, or ${DISABLE_ENV})")
        return (-(-batch_size // kernel.lane), n_head, max_tokens, head_size, kernel.lane)

    @classmethod
    def allocate(
        cls, batch_size: int, config: DecoderSizes, max_tokens: int, device: torch.device | str, dtype: torch.dtype
    ) -> KVCache:
        """As :meth:`KVCache.allocate`; ValueError where the kernel does not apply (see :func:`kernel_applies`)."""
        if not kernel_applies(config, device, dtype):
            raise ValueError(
                "the native decode kernel needs ReLU attention, float32 and a CPU, "
                f"got {config.attention!r}, {dtype}, {device}"
            )
        return super().allocate(batch_size, config, max_tokens, device, dtype)

    @property
    def capacity(self) -> int:
        """Number of token slots (``max_tokens`` of the model)."""
        return self.k[0].shape[2]

    def _into_lanes(self, dst: Tensor, src: Tensor) -> None:
        """Copy ``src`` (B, nh, m, hs) into the lanes ``dst`` (nb, nh, m, hs, L) of the first B trajectories.

        Two copies (the full blocks of L trajectories, then the partial last one) and no allocation;
        the padding lanes keep their zeros.
        """
        lane = dst.shape[-1]
        full, rest = divmod(src.shape[0], lane)
        if full:
            dst[:full].copy_(src[: full * lane].unflatten(0, (full, lane)).permute(0, 2, 3, 4, 1))
        if rest:
            dst[full, ..., :rest].copy_(src[full * lane :].permute(1, 2, 3, 0))

    def _from_lanes(self, x: Tensor) -> Tensor:
        """(nb, nh, m, hs, L) -> (B, nh, m, hs): the real trajectories, padding dropped."""
        return x.permute(0, 4, 1, 2, 3).flatten(0, 1)[: self.batch_size]

    def write(self, layer: int, k: Tensor, v: Tensor) -> None:
        """Store keys and values ``k``, ``v`` (B, n_new, nh, hs) at slots ``length .. length + n_new - 1``."""
        lo, hi = self.length, self.length + k.shape[1]
        self._into_lanes(self.k[layer][:, :, lo:hi], k.transpose(1, 2))
        self._into_lanes(self.v[layer][:, :, lo:hi], v.transpose(1, 2))

    def keys_values(self, layer: int, n_tot: int) -> tuple[Tensor, Tensor]:
        """Keys and values of slots ``0 .. n_tot-1``, each (B, nh, n_tot, hs) (views of the lanes)."""
        return self._from_lanes(self.k[layer][:, :, :n_tot]), self._from_lanes(self.v[layer][:, :, :n_tot])

    def relu_attend(self, layer: int, q: Tensor, n_tot: int) -> Tensor:
        """As :meth:`KVCache.relu_attend`, by :func:`relu_decode` on the lanes."""
        nb, nh, _, hs, lane = self.k[layer].shape
        q_lanes, y = self.workspace(2 * nb * nh * q.shape[2] * hs * lane).view(2, nb, nh, q.shape[2], hs, lane)
        self._into_lanes(q_lanes, q)
        relu_decode(q_lanes, self.k[layer], self.v[layer], n_tot, y)
        return self._from_lanes(y)


def new_kv_cache(
    batch_size: int, config: DecoderSizes, max_tokens: int, device: torch.device | str, dtype: torch.dtype
) -> KVCache:
    """An empty cache for a decoder's rollout, the one place that chooses the layout.

    A :class:`LanesKVCache` where the kernel applies (:func:`kernel_applies`) and works, else a
    :class:`KVCache` (the PyTorch path).
    """
    native = kernel_applies(config, device, dtype) and native_kernels() is not None
    return (LanesKVCache if native else KVCache).allocate(batch_size, config, max_tokens, device, dtype)
