"""``length_prior``: a per-user length prior, an example reward method for pytest-prefalign.

``r_u(x, y) = -|words(y) - L_u|`` where ``L_u`` is the mean number of words of the responses user
``u`` preferred in training (the mean over all users for a user with no training pairs).
Registered through the ``prefalign`` entry point in ``pyproject.toml``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pytest_prefalign import storage
from pytest_prefalign.api import Batch, Pair, RewardMethod


@dataclass(frozen=True)
class LengthPriorConfig:
    prior_pairs: float = 2.0  # pseudo-pairs at the overall mean that shrink each user's mean


def words(text: str) -> int:
    return len(text.split())


class LengthPrior(RewardMethod):
    name = "length_prior"
    capabilities = frozenset()  # score only: runs as bon[length_prior]
    version = 1  # bump when a change of the code changes what fit or score compute

    def __init__(self, config: LengthPriorConfig | None = None) -> None:
        self.config = config if config is not None else LengthPriorConfig()
        self.targets: dict[str, float] = {}  # user -> preferred length in words
        self.default: float | None = None  # for users without training pairs
        self.trained = False  # True when the last fit trained, False when it loaded

    def fingerprint(self) -> str:
        return f"{self.name}-v{self.version}-{storage.content_key(asdict(self.config))}"

    def fit(self, lm: Any, pairs: Sequence[Pair], cache_dir: Path) -> None:
        if not pairs:
            raise ValueError("length_prior: no training pairs to learn the users' lengths from")
        key = storage.content_key(
            self.fingerprint(),
            lm.fingerprint,
            [(p.pair_id, p.user, p.prompt, p.chosen, p.rejected) for p in pairs],
        )
        path = Path(cache_dir) / f"{self.name}-{key}.json"
        with storage.locked(path):  # pytest-xdist workers may fit at the same time
            if path.exists():
                params = storage.read_json(path)
                self.trained = False
            else:
                params = self.train(pairs)
                storage.atomic_write_json(path, params)
                self.trained = True
        self.targets, self.default = params["targets"], params["default"]

    def train(self, pairs: Sequence[Pair]) -> dict[str, Any]:
        """Each user's mean chosen length, shrunk toward the overall mean by ``prior_pairs``."""
        overall = float(np.mean([words(p.chosen) for p in pairs]))
        lengths: dict[str, list[int]] = {}
        for p in pairs:
            lengths.setdefault(p.user, []).append(words(p.chosen))
        k = self.config.prior_pairs
        targets = {u: (sum(n) + k * overall) / (len(n) + k) for u, n in sorted(lengths.items())}
        return {"targets": targets, "default": overall}

    def score(self, lm: Any, batch: Batch) -> np.ndarray:
        if self.default is None:
            raise RuntimeError("length_prior: call fit() before score()")
        return np.array(
            [-abs(words(r) - self.targets.get(u, self.default)) for u, _, r in batch],
            dtype=np.float64,
        )


def pytest_prefalign_register(registry: Any) -> None:
    registry.add_reward("length_prior", LengthPrior)
