"""``arm``: an autoregressive reward model (ARM) for GenARM, personal and cheap to train.

GenARM (Xu et al., 2025) learns a token-level reward ``r(x, y) = beta * sum_t log p_arm(y_t |
x, y_<t)`` from preference pairs with the loss ``-log sigmoid(beta * (sum_t log p_arm(y_w,t) -
sum_t log p_arm(y_l,t)))`` and decodes with ``logits_base + alpha * log p_arm``. The paper's ARM is
a LoRA-tuned copy of the base LM. Here the ARM is the frozen base LM with a low-rank personal
adapter on its final hidden state ``h`` (the state that predicts the next token), read out by the
base LM's own output head ``W`` (and bias ``b``, if any):

    v_u(h)  = (A h) * (1 + s_u) + z_u          A (r, H) shared; s_u, z_u (r,) per user
    logits  = W (h + B v_u(h)) + b             B (H, r) shared, zero at the start
    log p_arm(. | x, y_<t) = log_softmax(logits)

Training minimises the GenARM loss plus ``kl * sum_t KL(p_arm || p_base)`` per response (at the
training positions) plus the users' L2 prior. On Pref-LaMP the rejected title is by default a
similar paper's title by another author (``negatives = "other_author"``). With ``negatives =
"generated"`` it is the reference model's greedy title (the 135m model's, the base model at that
size), and the loss asks the ARM to make the base model's likeliest text unlikely; the cheapest
way is to move that mass onto tokens nobody writes (found in practice: GenARM then wrote ")."
over and over). The reverse KL makes mass outside the base model's support expensive, whichever
the negatives.

``B`` starts at zero, so the untrained ARM is the base LM, as a LoRA starts at its base model.
``s_u`` rescales the shared adapter's directions for a user and ``z_u`` adds a user embedding
(a personal shift of the state, hence of the vocabulary); both are shrunk toward zero by an L2
penalty, and a user without training pairs gets zeros: the shared adapter alone.

Training cost: ``logits = W h + b + (W B) v``. The base logits ``W h + b`` need no gradient and
are computed once (kept in memory up to ``logit_cache_mb``), and the gradient reaches ``B``
through the ``(V, r)`` matrix ``W B``, so a step costs O(tokens x V x r) instead of
O(tokens x V x H).

This module declares the method (its configuration in ``arm_config``) without torch: torch,
the adapter and its training (``arm_training``) are imported where it is fitted, loaded or
asked for rewards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from prefalign_methods.rewards.arm_config import ARMConfig, check_config
from prefalign_methods.rewards.bt_heads import load_or_train
from pytest_prefalign import storage
from pytest_prefalign.api import Batch, Pair, RewardMethod

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from prefalign_methods.rewards.arm_training import Adapter
    from pytest_prefalign.runtime.lm import LM


class ARM(RewardMethod):
    """The ``arm`` reward method; see the module docstring. ``history`` holds each epoch's mean
    training loss and accuracy (from the cache's JSON when ``fit`` loaded)."""

    name = "arm"
    default_decoder = "genarm"  # the decoder an autoregressive RM is made for
    # "prefix" too (cumulative token rewards), so that args[arm] can run; the default method
    # list still pairs arm with genarm, through default_decoder
    capabilities: ClassVar[frozenset[str]] = frozenset({"next_token", "hidden_logprobs", "prefix"})
    version: ClassVar[int] = 2  # bump when a code change changes what training produces
    Config: ClassVar[type[ARMConfig]] = ARMConfig  # set with --prefalign-option arm.FIELD=VALUE

    def __init__(self, config: ARMConfig | None = None) -> None:
        self.config = config if config is not None else ARMConfig()
        check_config(self.config)
        self.trained = False  # True when the last ``fit`` trained, False when it loaded
        self.info: dict[str, Any] = {}
        self._users: dict[str, int] = {}
        self._adapter: Adapter | None = None
        self._head: tuple[torch.Tensor, torch.Tensor | None] | None = None
        self._lm_fingerprint = ""

    def fingerprint(self) -> str:
        return f"{self.name}-v{self.version}-{storage.content_key(asdict(self.config))}"

    @property
    def history(self) -> list[dict[str, float]]:
        return list(self.info.get("history", []))

    # -- training and the cache ---------------------------------------------------------------

    def fit(self, lm: LM, pairs: Sequence[Pair], cache_dir: Path) -> None:
        if not pairs:
            raise ValueError(
                "arm: no training pairs; this reward method is trained on the "
                "suite's training pairs"
            )
        from prefalign_methods.rewards.arm_training import output_head

        self._head = output_head(lm)
        self._lm_fingerprint = lm.fingerprint
        load_or_train(self, lm, pairs, cache_dir)

    def _save(self, tensors_path: Path, meta_path: Path, lm: LM) -> None:
        from safetensors.torch import save as save_tensors

        storage.atomic_write_bytes(tensors_path, save_tensors(self._tensors()))
        storage.atomic_write_json(
            meta_path,
            {
                "method": self.name,
                "fingerprint": self.fingerprint(),
                "config": asdict(self.config),
                "lm": lm.fingerprint,
                **self.info,
            },
        )

    def _train(self, lm: LM, pairs: Sequence[Pair]) -> None:
        import torch

        from prefalign_methods.rewards.arm_training import Adapter, token_data, train

        names = sorted({p.user for p in pairs})
        self._users = {u: i for i, u in enumerate(names)}
        data = token_data(lm, pairs, self._users, self._head_weights(), self.config)
        generator = torch.Generator().manual_seed(self.config.seed)
        self._adapter = Adapter(data.hidden.shape[1], self.config.rank, len(names), generator)
        history = train(self._adapter, data, self._head_weights(), self.config, generator)
        self.info = {
            "users": names,
            "hidden_size": int(data.hidden.shape[1]),
            "n_pairs": len(pairs),
            "n_tokens": int(data.target.shape[0]),
            "history": history,
        }

    def _tensors(self) -> dict[str, torch.Tensor]:
        adapter = self._require_adapter()
        return {k: v.detach().contiguous() for k, v in adapter.state_dict().items()}

    def _load(self, tensors_path: Path, meta_path: Path) -> None:
        import torch
        from safetensors.torch import load as load_tensors

        from prefalign_methods.rewards.arm_training import Adapter

        self.info = storage.read_json(meta_path)
        names = list(self.info["users"])
        self._users = {u: i for i, u in enumerate(names)}
        generator = torch.Generator().manual_seed(self.config.seed)
        self._adapter = Adapter(
            int(self.info["hidden_size"]), self.config.rank, len(names), generator
        )
        self._adapter.load_state_dict(load_tensors(tensors_path.read_bytes()), strict=True)

    # -- rewards ------------------------------------------------------------------------------

    def score(self, lm: LM, batch: Batch) -> np.ndarray:
        """``beta * sum_t log p_arm(y_t | x, y_<t)`` over the response tokens (eos included)."""
        return np.array([float(r.sum()) for r in self._token_rewards(lm, batch)])

    def prefix_rewards(self, lm: LM, batch: Batch) -> list[np.ndarray]:
        """``r_u(x, y_<=t)``: cumulative sums of the token rewards; the last equals ``score``."""
        return [np.cumsum(r) for r in self._token_rewards(lm, batch)]

    def next_token_logprobs(self, lm: LM, batch: Batch) -> list[np.ndarray]:
        """``log p_arm(. | x, y_<t)`` ``(T_y, V)`` float32 for each response position."""
        from pytest_prefalign.runtime.hidden import predicting_hidden

        self._check_model(lm)
        hidden = predicting_hidden(lm, batch.prompts, batch.responses)
        return [
            self.logprobs_from_hidden([u], h[None])[0].cpu().numpy()
            for u, h in zip(batch.users, hidden, strict=True)
        ]

    def logprobs_from_hidden(self, users: Sequence[str], hidden: torch.Tensor) -> torch.Tensor:
        """``log p_arm`` ``(N, ..., V)`` float32 from final-layer states ``(N, ..., H)`` of the
        base LM, one user per leading row; on ``hidden``'s device."""
        import torch
        import torch.nn.functional as F

        adapter = self._require_adapter()
        if hidden.dim() < 2 or hidden.shape[0] != len(users):
            raise ValueError(
                f"arm: expected hidden states (N, ..., H) with N = {len(users)} "
                f"users, got shape {tuple(hidden.shape)}"
            )
        if hidden.shape[-1] != adapter.A.shape[1]:
            raise ValueError(
                f"arm: hidden size {hidden.shape[-1]} but the ARM was trained on "
                f"{adapter.A.shape[1]} (another model?)"
            )
        with torch.no_grad():
            device = hidden.device
            adapter = adapter.to(device)
            user = torch.tensor(
                [self._users.get(u, len(self._users)) for u in users],
                dtype=torch.long,
                device=device,
            )
            flat = hidden.reshape(hidden.shape[0], -1, hidden.shape[-1]).float()
            weight, bias = self._head_weights()
            weight, bias = weight.to(device), bias.to(device) if bias is not None else None
            shifted = flat + adapter.codes(user, flat) @ adapter.B.T
            logprobs = torch.log_softmax(F.linear(shifted, weight, bias), dim=-1)
            return logprobs.reshape(*hidden.shape[:-1], -1)

    def _token_rewards(self, lm: LM, batch: Batch) -> list[np.ndarray]:
        """``beta * log p_arm(y_t | x, y_<t)`` per response token, float64."""
        import torch

        from prefalign_methods.rewards.arm_training import ROWS_PER_CHUNK
        from pytest_prefalign.runtime.hidden import predicting_hidden

        self._check_model(lm)
        hidden = predicting_hidden(lm, batch.prompts, batch.responses)
        targets = [torch.tensor(lm.response_ids(r)) for r in batch.responses]
        rows = torch.cat(hidden) if hidden else torch.zeros((0, 1))
        row_users = [u for u, h in zip(batch.users, hidden, strict=True) for _ in range(h.shape[0])]
        target = torch.cat(targets) if targets else torch.zeros(0, dtype=torch.long)
        picked = torch.cat(
            [
                self._gathered(
                    row_users[i : i + ROWS_PER_CHUNK],
                    rows[i : i + ROWS_PER_CHUNK],
                    target[i : i + ROWS_PER_CHUNK],
                )
                for i in range(0, len(row_users), ROWS_PER_CHUNK)
            ]
            or [torch.zeros(0, dtype=torch.float64)]
        )
        rewards = (self.config.beta * picked).numpy()
        return list(np.split(rewards, np.cumsum([len(t) for t in targets])[:-1]))

    def _gathered(self, users: list[str], rows: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logprobs = self.logprobs_from_hidden(users, rows)
        return logprobs.gather(-1, target.to(rows.device)[:, None])[:, 0].double().cpu()

    def _check_model(self, lm: LM) -> None:
        self._require_adapter()
        if lm.fingerprint != self._lm_fingerprint:
            raise ValueError(
                f"arm: fitted on model {self._lm_fingerprint}, asked to score "
                f"with {lm.fingerprint}; fit it on this model first"
            )

    def _require_adapter(self) -> Adapter:
        if self._adapter is None:
            raise RuntimeError("arm: call fit() before asking for rewards")
        return self._adapter

    def _head_weights(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self._head is None:
            raise RuntimeError("arm: call fit() before asking for rewards")
        return self._head
