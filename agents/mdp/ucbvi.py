"""UCB-VI and soft UCB-VI(tau) for tabular MDPs (Appendix G.2, after Azar et al. 2017).

At the start of every episode k, backward over h = H..1 with counts from episodes 1..k-1:

    P_hat_h(s' | s, a) = N_h(s, a, s') / max(N_h(s, a), 1),   R_hat_h(s, a) = sum of rewards / max(N_h(s, a), 1),
    b_h(s, a) = 2 H sqrt(log(S A T / delta) / max(N_h(s, a), 1)),   delta = 1 / (K H),
    Q_h(s, a) = min{H, R_hat_h(s, a) + b_h(s, a) + sum_{s'} P_hat_h(s' | s, a) V_{h+1}(s')},   V_h = max_a Q_h,

then act greedily (UCB-VI) or by softmax(Q_h(s, .) / tau) (soft UCB-VI).  The paper writes R_h
for the mean reward; here it is estimated from the observed rewards, as the rewards are random.
Counts are incremental; ``stationary=True`` pools them over h (for stationary MDPs such as DarkRoom;
the default ``None`` follows the environment's ``info["stationary"]``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.mdp.greedy_q import GreedyQAgent
from icrl_gym.envs.mdp_instances import max_over_actions
from icrl_gym.envs.validation import check_number


class UCBVI(GreedyQAgent):
    """UCB-VI with the paper's bonus; soft when ``temperature > 0``."""

    name = "ucbvi"
    keeps_counts = True

    def __init__(
        self,
        temperature: float = 0.0,
        bonus_scale: float = 1.0,
        stationary: bool | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(temperature=temperature, seed=seed)
        self.bonus_scale, self.stationary = check_number("bonus_scale", bonus_scale, low=0.0), stationary

    def _reset(self, instance: Any) -> None:
        self.counts = self._new_counts(self.stationary)

    def plan(self) -> np.ndarray:
        """Optimistic Q_h (B, H, S, A) from the current counts (the backward pass above)."""
        H, S, A = self.horizon, self.num_states, self.num_actions
        T = self.episodes * H
        delta = 1.0 / (self.episodes * H)
        c = self.counts
        n = np.maximum(c.n_sa, 1.0)
        p_hat = c.n_sas / n[..., None]
        r_hat = c.reward_sum / n
        bonus = self.bonus_scale * 2 * H * np.sqrt(np.log(S * A * T / delta) / n)
        q = np.zeros((self.batch_size, H, S, A))
        v = np.zeros((self.batch_size, S))
        for h in range(H - 1, -1, -1):
            i = c.index(h)
            q[:, h] = np.minimum(H, r_hat[:, i] + bonus[:, i] + np.einsum("bsat,bt->bsa", p_hat[:, i], v))
            v = max_over_actions(q[:, h])
        return q

    def _begin_episode(self) -> None:
        self.q = self.plan()

    def _update(self, states, h, actions, rewards, next_states) -> None:
        self.counts.update(states, h, actions, rewards, next_states)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters."""
        return {**super().config(), "bonus_scale": self.bonus_scale, "stationary": self.stationary}
