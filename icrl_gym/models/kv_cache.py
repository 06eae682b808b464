"""The key/value cache of a decoder's online rollout, and the PyTorch path of its ReLU attention step.

A cached decode step appends the keys and values of the ``n_new`` newest tokens and attends their
queries to every cached token.  :class:`KVCache` stores them token-major and computes the step
with two batched matrix products; the compiled CPU kernel keeps its own layout in a subclass,
:class:`~icrl_gym.models.native.LanesKVCache`, and :func:`~icrl_gym.models.native.new_kv_cache`
picks between the two.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from icrl_gym.config import Choice


class Attention(Choice):
    """The attention of a decoder: ReLU normalised by the query position (Definition 1) or causal softmax.

    It decides what a decode step reads of the cache (:attr:`~icrl_gym.models.decoder.DecoderConfig.attention`).
    """

    RELU = "relu"
    SOFTMAX = "softmax"


class DecoderSizes(Protocol):
    """What a cache needs of a decoder configuration (:class:`~icrl_gym.models.decoder.DecoderConfig`)."""

    n_layer: int
    n_head: int
    n_embd: int
    attention: Attention


@functools.lru_cache(maxsize=4096)
def future_mask(n_past: int, n_new: int, device: torch.device) -> Tensor:
    """(n_new, n_past + n_new) bool, True where key j (0-based, absolute) lies after new query i."""
    q_pos = torch.arange(n_past, n_past + n_new, device=device)
    return torch.arange(n_past + n_new, device=device)[None, :] > q_pos[:, None]


def relu_cached_attention(q: Tensor, k: Tensor, v: Tensor, scores: Tensor) -> Tensor:
    """ReLU attention of the ``n_new`` newest tokens against the whole cache, written into ``scores``.

    ``q`` (N, n_new, hs), already scaled; ``k``, ``v`` (N, n_tot, hs): the cache up to and including
    the new tokens (any strides with a unit last one: the token-major cache gives rows ``N * hs``
    apart); ``scores`` a flat workspace of ``N * n_new * n_tot`` elements.  Returns
    ``y_i = sum_{j <= i} ReLU(<q_i, k_j>) v_j`` (N, n_new, hs).  The scores go into the reused,
    contiguous workspace (a fresh (N, n_new, n_tot) tensor per layer and step costs more in page
    faults than the product itself), and only the n_new x n_new block of the new keys is masked:
    every cached key precedes every new query.
    """
    N, n_new, _ = q.shape
    n_tot = k.shape[1]
    att = scores.view(N, n_new, n_tot)
    torch.bmm(q, k.transpose(1, 2), out=att).relu_()
    if n_new > 1:
        att[:, :, n_tot - n_new :].masked_fill_(future_mask(0, n_new, q.device), 0.0)
    return torch.bmm(att, v)


@dataclass
class KVCache:
    """Preallocated per-layer keys/values for incremental decoding with a decoder's ``step``.

    ``k[l]`` and ``v[l]`` are ``(max_tokens, B, nh, hs)``, token-major, so that the filled slots are
    one dense block of memory that a decode step reads whole (with the batch-major
    ``(B, nh, max_tokens, hs)`` layout the same read took about 1.6x as long on a 2-core CPU).
    Subclasses may lay the buffers out otherwise: they override :meth:`allocate`, :attr:`capacity`,
    :meth:`write`, :meth:`keys_values` and :meth:`relu_attend`.

    New keys/values are written in place, so a step costs ``O(length)``.  ``steps`` counts
    environment steps taken and ``last_action_set`` (``(B, A, d)``) remembers the action set of the
    latest step, from which the vector of the next step's ``prev_action`` is read.
    """

    k: list[Tensor]
    v: list[Tensor]
    batch_size: int
    """Number of trajectories B held by the cache."""
    length: int = 0
    steps: int = 0
    last_action_set: Tensor | None = field(default=None, repr=False)
    last_tokens: Tensor | None = field(default=None, repr=False)
    """Raw features (B, p, F) of the latest p tokens, for a model whose embedding reads p predecessors."""
    scores: Tensor | None = field(default=None, repr=False)
    """Flat workspace of a cached ReLU attention step, reused by every layer and step."""

    @classmethod
    def buffer_shape(cls, batch_size: int, n_head: int, head_size: int, max_tokens: int) -> tuple[int, ...]:
        """Shape of one layer's key (or value) buffer: ``(max_tokens, B, nh, hs)``."""
        return (max_tokens, batch_size, n_head, head_size)

    @classmethod
    def allocate(
        cls, batch_size: int, config: DecoderSizes, max_tokens: int, device: torch.device | str, dtype: torch.dtype
    ) -> KVCache:
        """A cache of ``max_tokens`` slots per layer for the decoder of ``config``.

        The buffers are zero-filled once here (not ``empty``): the pages are touched at allocation
        instead of one page fault at a time inside the rollout (``empty`` measured no faster: 0.98x).
        """
        shape = cls.buffer_shape(batch_size, config.n_head, config.n_embd // config.n_head, max_tokens)
        ks = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        vs = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        return cls(k=ks, v=vs, batch_size=batch_size)

    @property
    def capacity(self) -> int:
        """Number of token slots (``max_tokens`` of the model)."""
        return self.k[0].shape[0]

    def reset(self) -> None:
        """Empty the cache for a new rollout, keeping its buffers (stale entries are never read)."""
        self.length = 0
        self.steps = 0
        self.last_action_set = None
        self.last_tokens = None

    def mark(self) -> tuple[int, int, Tensor | None, Tensor | None]:
        """The cache before a step, for :meth:`rewind`: O(1), as a step only writes at slots >= ``length``."""
        return self.length, self.steps, self.last_action_set, self.last_tokens

    def rewind(self, mark: tuple[int, int, Tensor | None, Tensor | None]) -> None:
        """Take back the step after :meth:`mark`: its slots become stale (never read; the next step writes them)."""
        self.length, self.steps, self.last_action_set, self.last_tokens = mark

    def workspace(self, numel: int) -> Tensor:
        """The first ``numel`` elements of :attr:`scores`, grown (never shrunk) when too small (zero-filled)."""
        if self.scores is None or self.scores.numel() < numel:
            self.scores = self.k[0].new_zeros(numel)
        return self.scores[:numel]

    def write(self, layer: int, k: Tensor, v: Tensor) -> None:
        """Store keys and values ``k``, ``v`` (B, n_new, nh, hs) at slots ``length .. length + n_new - 1``."""
        lo, hi = self.length, self.length + k.shape[1]
        self.k[layer][lo:hi] = k.transpose(0, 1)
        self.v[layer][lo:hi] = v.transpose(0, 1)

    def keys_values(self, layer: int, n_tot: int) -> tuple[Tensor, Tensor]:
        """Keys and values of slots ``0 .. n_tot-1``, each (B, nh, n_tot, hs) (views of the buffers)."""
        return self.k[layer][:n_tot].permute(1, 2, 0, 3), self.v[layer][:n_tot].permute(1, 2, 0, 3)

    def relu_attend(self, layer: int, q: Tensor, n_tot: int) -> Tensor:
        """ReLU attention (B, nh, n_new, hs) of the new queries ``q`` (already scaled) to slots ``0 .. n_tot-1``.

        ``y_i = sum_{j <= i} ReLU(<q_i, k_j>) v_j``; the new keys are the last ``n_new`` slots.
        """
        B, nh, n_new, hs = q.shape
        k, v = self.keys_values(layer, n_tot)
        flat_q, flat_kv = (B * nh, n_new, hs), (B * nh, n_tot, hs)
        scores = self.workspace(B * nh * n_new * n_tot)
        y = relu_cached_attention(q.reshape(flat_q), k.reshape(flat_kv), v.reshape(flat_kv), scores)
        return y.view(B, nh, n_new, hs)
