"""The Bradley-Terry reward method: what the five built-in personal reward methods
(``global_bt``, ``per_user_bt``, ``lore``, ``vpl``, ``pal``) share, ``HeadRewardMethod``.

Each method is a set of heads on the frozen backbone's standardised hidden states (its torch
module, in ``heads``). This class does the rest, once for all of them: whole-response features
of the training pairs, their standardisation, the heads' training, the on-disk cache of the
trained parameters (safetensors for the tensors, JSON for the user index and the config; never
pickle), and the three ways a decoder reads a reward: ``score`` (whole responses),
``prefix_rewards`` (every prefix of a response, from one ``response_hidden`` pass) and
``reward_from_hidden`` (any hidden state, e.g. the candidates of one ARGS step).

Users are indexed by the order of their names; a user with no training pairs gets index -1 and
each method decides what that means (the global head, the mean user weights, ...).

No torch at import: a method is declared (registered, listed, collected) without it; torch,
the heads and the features are imported where the method is fitted, loaded or asked for a
reward.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pytest_prefalign import cache, events, storage, versions
from pytest_prefalign.api import Batch, Pair, RewardMethod

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

    from prefalign_methods.rewards.heads import Heads
    from pytest_prefalign.runtime.lm import LM


def pairs_fingerprint(pairs: Sequence[Pair]) -> str:
    """The training data's part of the cache key: every field of every pair, in order."""
    return storage.content_key([(p.pair_id, p.user, p.prompt, p.chosen, p.rejected) for p in pairs])


class HeadRewardMethod(RewardMethod):
    """A reward method made of ``Heads`` on the base LM's whole-response features.

    Subclasses set ``name``, ``Config`` (a dataclass with at least ``seed`` and ``max_iter``)
    and ``build``. ``version`` is part of the fingerprint: bump it when a change to the code
    changes what training produces, so old cached parameters are not reused.
    """

    capabilities: ClassVar[frozenset[str]] = frozenset({"prefix", "hidden"})
    Config: ClassVar[type[Any]]
    version: ClassVar[int] = 1

    def __init__(self, config: Any | None = None) -> None:
        self.config = config if config is not None else self.Config()
        self.trained = False  # True when the last ``fit`` trained, False when it loaded
        self.info: dict[str, Any] = {}  # what the cache's JSON says: users, loss, accuracy
        self._users: dict[str, int] = {}
        self._heads: Heads | None = None
        # the features' standardisation, once fitted or loaded (no torch before: a method
        # whose values all come from the cache is made, and asked nothing, without it)
        self._mean: torch.Tensor | None = None
        self._std: torch.Tensor | None = None

    def build(self, n_users: int, dim: int, generator: torch.Generator) -> Heads:
        """The untrained heads for ``n_users`` users and hidden size ``dim``."""
        raise NotImplementedError

    def fingerprint(self) -> str:
        config = json.dumps(asdict(self.config), sort_keys=True)
        return f"{self.name}-v{self.version}{config}"

    # -- training and the cache ---------------------------------------------------------------

    def fit(self, lm: LM, pairs: Sequence[Pair], cache_dir: Path) -> None:
        if not pairs:
            raise ValueError(
                f"{self.name}: no training pairs; this reward method is trained on "
                "the suite's training pairs"
            )
        load_or_train(self, lm, pairs, cache_dir)

    def features(self, lm: LM, prompts: Sequence[str], responses: Sequence[str]) -> torch.Tensor:
        """``(N, H)`` whole-response features of the heads: the base LM's final hidden state
        after each response (``features.response_features``); a variant on another backbone
        says what it reads instead."""
        from prefalign_methods.rewards.features import response_features

        return response_features(lm, prompts, responses)

    def _train(self, lm: LM, pairs: Sequence[Pair]) -> None:
        import torch

        from prefalign_methods.rewards.heads import DTYPE, TrainPairs, standardiser, train

        # one request with both sides of each pair next to each other, so that the LM prefills
        # each prompt once for the two responses
        both = self.features(
            lm,
            [p.prompt for p in pairs for _ in range(2)],
            [r for p in pairs for r in (p.chosen, p.rejected)],
        ).to(DTYPE)
        chosen, rejected = both[0::2], both[1::2]
        self._mean, self._std = standardiser(torch.cat([chosen, rejected]))
        names = sorted({p.user for p in pairs})
        self._users = {u: i for i, u in enumerate(names)}
        user = torch.tensor([self._users[p.user] for p in pairs], dtype=torch.long)
        counts = torch.bincount(user, minlength=len(names)).to(DTYPE)
        data = TrainPairs(
            self._standardise(chosen), self._standardise(rejected), user, counts / counts.sum()
        )
        generator = torch.Generator().manual_seed(self.config.seed)
        self._heads = self.build(len(names), chosen.shape[1], generator)
        self._heads.prepare(data)
        with events.step(f"training {self.name} (L-BFGS)"):
            loss = train(self._heads, data, self.config.max_iter)
        with torch.no_grad():
            accuracy = float((self._heads.margins(data) > 0).to(DTYPE).mean())
        self.info = {
            "users": names,
            "dim": int(chosen.shape[1]),
            "n_pairs": len(pairs),
            "train_loss": loss,
            "train_accuracy": accuracy,
        }

    def _save(self, tensors_path: Path, meta_path: Path, lm: LM) -> None:
        from safetensors.torch import save as save_tensors

        if self._heads is None:
            raise RuntimeError(f"{self.name}: nothing trained to save")
        tensors = {
            f"heads.{k}": v.detach().contiguous() for k, v in self._heads.state_dict().items()
        }
        mean, std = self._standardisation()
        tensors.update({"feature_mean": mean, "feature_std": std})
        storage.atomic_write_bytes(tensors_path, save_tensors(tensors))
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

    def _load(self, tensors_path: Path, meta_path: Path) -> None:
        import torch
        from safetensors.torch import load as load_tensors

        self.info = storage.read_json(meta_path)
        tensors = load_tensors(tensors_path.read_bytes())
        names = list(self.info["users"])
        self._users = {u: i for i, u in enumerate(names)}
        self._mean, self._std = tensors["feature_mean"], tensors["feature_std"]
        generator = torch.Generator().manual_seed(self.config.seed)
        self._heads = self.build(len(names), int(self.info["dim"]), generator)
        state = {k.removeprefix("heads."): v for k, v in tensors.items() if k.startswith("heads.")}
        self._heads.load_state_dict(state, strict=True)

    # -- rewards ------------------------------------------------------------------------------

    def score(self, lm: LM, batch: Batch) -> np.ndarray:
        feats = self.features(lm, batch.prompts, batch.responses)
        return self._rewards(batch.users, feats).cpu().numpy()

    def prefix_rewards(self, lm: LM, batch: Batch) -> list[np.ndarray]:
        """``r_u(x, y_<=t)`` for every response token ``t`` (the final ``eos_id`` included, so
        the last value is ``score``), from one teacher-forced pass."""
        from prefalign_methods.rewards.features import remember

        hidden = lm.response_hidden(batch.prompts, batch.responses)
        remember(lm, batch.prompts, batch.responses, hidden)
        return [
            self._rewards([u], h[None])[0].cpu().numpy()
            for u, h in zip(batch.users, hidden, strict=True)
        ]

    def reward_from_hidden(self, users: Sequence[str], hidden: torch.Tensor) -> torch.Tensor:
        """Rewards ``(N, ...)`` from final-layer hidden states ``(N, ..., H)``, one user per
        leading row, in ``hidden``'s dtype and on its device."""
        if hidden.dim() < 2 or hidden.shape[0] != len(users):
            raise ValueError(
                f"{self.name}: expected hidden states (N, ..., H) with N = "
                f"{len(users)} users, got shape {tuple(hidden.shape)}"
            )
        return self._rewards(users, hidden).to(hidden.dtype)

    def _rewards(self, users: Sequence[str], hidden: torch.Tensor) -> torch.Tensor:
        """float64 rewards ``(N, ...)``; unknown users get index ``UNKNOWN``."""
        import torch

        from prefalign_methods.rewards.heads import DTYPE, UNKNOWN

        if self._heads is None:
            raise RuntimeError(f"{self.name}: call fit() before asking for rewards")
        mean, _ = self._standardisation()
        if hidden.shape[-1] != mean.shape[0]:
            raise ValueError(
                f"{self.name}: hidden size {hidden.shape[-1]} but the heads were "
                f"trained on {mean.shape[0]} (another model?)"
            )
        with torch.no_grad():
            device = hidden.device
            heads = self._heads.to(device)
            user = torch.tensor(
                [self._users.get(u, UNKNOWN) for u in users], dtype=torch.long, device=device
            )
            return heads(user, self._standardise(hidden.to(device=device, dtype=DTYPE)))

    def _standardise(self, h: torch.Tensor) -> torch.Tensor:
        mean, std = self._standardisation()
        return (h - mean.to(h.device)) / std.to(h.device)

    def _standardisation(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The features' mean and standard deviation, as fitted or loaded."""
        if self._mean is None or self._std is None:
            raise RuntimeError(f"{self.name}: call fit() before asking for rewards")
        return self._mean, self._std


def load_or_train(method: Any, lm: LM, pairs: Sequence[Pair], cache_dir: Path) -> None:
    """Load ``method``'s parameters cached for (its config and code, the backbone, the pairs),
    or train and save them, under a lock that pytest-xdist workers share. ``method`` provides
    ``_load(tensors_path, meta_path)``, ``_train(lm, pairs)`` and ``_save(tensors_path,
    meta_path, lm)``; afterwards ``method.trained`` says which happened."""
    key = storage.content_key(
        method.fingerprint(),
        versions.code_version(type(method)),
        lm.fingerprint,
        pairs_fingerprint(pairs),
    )
    tensors_path = Path(cache_dir) / f"{method.name}-{key}.safetensors"
    meta_path = tensors_path.with_suffix(".json")
    with storage.locked(meta_path):
        # the JSON is written last, so its presence means both files are complete
        if meta_path.exists() and tensors_path.exists():
            try:
                method._load(tensors_path, meta_path)
            except Exception as exc:  # truncated or foreign files: a miss, trained again
                cache.discard(tensors_path, exc, meta_path)
            else:
                method.trained = False
                return
        method._train(lm, pairs)
        method._save(tensors_path, meta_path, lm)
        method.trained = True
