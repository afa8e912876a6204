"""``oracle``: the true reward of the synthetic suite, read from the rule in the user id
(``rules.py``). Registered through the ``prefalign`` entry-point group like any third-party
reward method; it knows nothing a third party could not know.

``r_u(x, y) = scale * sign * (rule_u(y) + noise * z(u, x, y))``, where ``z`` is a standard normal
draw fixed by a hash of ``(seed, u, x, y)`` (the same input always gets the same reward).

- ``oracle``: the rule itself (sign +1, no noise): RM accuracy 1 on the suite's pairs;
- ``oracle_noisy``: the rule plus noise of two rule units (sd): right on about two pairs in
  three;
- ``oracle_negated``: the rule reversed (sign -1): RM accuracy 0;
- the noise ladder ``oracle``, ``oracle_noise1``, ``oracle_noisy`` (2), ``oracle_noise4``,
  ``oracle_noise8``: noise of 0, 1, 2, 4 and 8 rule units. The noise draw ``z`` does not depend
  on the noise level, so a pair the oracle gets wrong at one level it gets wrong at every
  higher level: RM accuracy falls with the noise by construction (towards 1/2), and the
  analysis has five reward methods whose true order is known.

Each takes ``--prefalign-option oracle.sign=-1`` (``noise``, ``scale``, ``seed`` too).

**Scale.** One rule unit (a word, a colon, a vocabulary word) is worth ``scale`` = 50 nats. A
guided policy weighs the reward against the base model's log-likelihood (``bon``:
``log pi_base(y|x) + r/beta``; ``args``: ``logit + w * r``), and a title's log-likelihood under a
small model spans tens of nats, so a reward in the units of the rule (0 or 1) would hardly move
either; at 50 nats a unit, the rule decides.

Capabilities: ``"prefix"``: ``prefix_rewards`` scores the text of every prefix of the response's
tokens (``lm.response_ids``), the last (after ``eos_id``) being ``score``; so it runs under
``args`` and ``bon``. Users whose id holds no rule (another suite's) are refused in ``fit``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from prefalign_suites.synthetic.rules import Rule, rule_of
from pytest_prefalign.api import Batch, Pair, RewardMethod

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.runtime.lm import LM

VERSION = 1  # bump when what the oracle computes changes
_NORMAL = NormalDist()


@dataclass(frozen=True)
class OracleConfig:
    sign: int = 1  # +1: the rule; -1: the rule reversed
    noise: float = 0.0  # sd of the Gaussian noise added to the rule's score, in rule units
    scale: float = 50.0  # nats per rule unit: large enough for a guided policy to follow it
    seed: int = 0  # seed of the noise

    def __post_init__(self) -> None:
        if self.sign not in (1, -1):
            raise ValueError(f"sign must be 1 or -1, got {self.sign}")
        if not (math.isfinite(self.noise) and self.noise >= 0):
            raise ValueError(f"noise must be a finite number >= 0, got {self.noise}")
        if not (math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"scale must be a finite number > 0, got {self.scale}")


@dataclass(frozen=True)
class NoisyConfig(OracleConfig):
    noise: float = 2.0  # two rule units: wrong on about a third of the pairs


@dataclass(frozen=True)
class NegatedConfig(OracleConfig):
    sign: int = -1  # the rule reversed


class Oracle(RewardMethod):
    """The rule of the user id, scaled; see the module docstring."""

    name: ClassVar[str] = "oracle"
    capabilities = frozenset({"prefix"})
    # its rewards are in nats by construction (``scale`` per rule unit): not standardised
    # (pytest_prefalign/evaluation/scale.py), so that the rule decides a guided policy
    rewards_in_nats: ClassVar[bool] = True
    Config: ClassVar[type[OracleConfig]] = OracleConfig
    # it knows the synthetic suite's users only: no row in the default method list
    in_default_methods = False

    def __init__(self, config: OracleConfig | None = None) -> None:
        self.config = config or self.Config()
        self.trained = False  # nothing to train or load

    def fingerprint(self) -> str:
        fields = json.dumps(dataclasses.asdict(self.config), sort_keys=True)
        return f"{self.name}-v{VERSION}-{fields}"

    def fit(self, lm: LM, pairs: Sequence[Pair], cache_dir: Path) -> None:
        """Nothing to learn; every user must hold a rule (the first who does not is named)."""
        for user in dict.fromkeys(p.user for p in pairs):
            rule_of(user)

    def score(self, lm: LM, batch: Batch) -> np.ndarray:
        rules = {u: rule_of(u) for u in set(batch.users)}
        return np.array([self.reward(rules[u], u, p, r) for u, p, r in batch], dtype=np.float64)

    def prefix_rewards(self, lm: LM, batch: Batch) -> list[np.ndarray]:
        """The reward of the text of every token prefix of each response, then of the whole
        response (its ``eos_id``). Prefixes are cut from the response by the tokenizer's
        character offsets; the same prefix text is scored once per call (ARGS asks for many
        candidates that share their prefixes)."""
        rules = {u: rule_of(u) for u in set(batch.users)}
        memo: dict[tuple[str, str, str], float] = {}

        def reward(user: str, prompt: str, text: str) -> float:
            key = (user, prompt, text)
            if key not in memo:
                memo[key] = self.reward(rules[user], user, prompt, text)
            return memo[key]

        out = []
        for (user, prompt, response), ends in zip(
            batch, prefix_ends(lm, batch.responses), strict=True
        ):
            values = [reward(user, prompt, response[:end]) for end in ends]
            values.append(reward(user, prompt, response))
            out.append(np.asarray(values, dtype=np.float64))
        return out

    def reward(self, rule: Rule, user: str, prompt: str, text: str) -> float:
        value = rule.score(text)
        if self.config.noise:
            value += self.config.noise * noise(self.config.seed, user, prompt, text)
        return self.config.scale * self.config.sign * value


class NoisyOracle(Oracle):
    name = "oracle_noisy"
    Config = NoisyConfig


class NegatedOracle(Oracle):
    name = "oracle_negated"
    Config = NegatedConfig


@dataclass(frozen=True)
class Noise1Config(OracleConfig):
    noise: float = 1.0


@dataclass(frozen=True)
class Noise4Config(OracleConfig):
    noise: float = 4.0


@dataclass(frozen=True)
class Noise8Config(OracleConfig):
    noise: float = 8.0


class Noise1Oracle(Oracle):
    name = "oracle_noise1"
    Config = Noise1Config


class Noise4Oracle(Oracle):
    name = "oracle_noise4"
    Config = Noise4Config


class Noise8Oracle(Oracle):
    name = "oracle_noise8"
    Config = Noise8Config


# oracle (noise 0), oracle_noise1, oracle_noisy (2), oracle_noise4, oracle_noise8
LADDER: tuple[type[Oracle], ...] = (Oracle, Noise1Oracle, NoisyOracle, Noise4Oracle, Noise8Oracle)


def noise(seed: int, user: str, prompt: str, text: str) -> float:
    """A standard normal value fixed by the input (a hash, not a generator's state)."""
    digest = hashlib.blake2b(
        "\x00".join((str(seed), user, prompt, text)).encode(), digest_size=8
    ).digest()
    return _NORMAL.inv_cdf((int.from_bytes(digest, "big") + 0.5) / 2**64)


def prefix_ends(lm: LM, responses: Sequence[str]) -> list[list[int]]:
    """For each response, where the text of each of its tokens (``lm.response_ids`` without
    ``eos_id``) ends, as a character offset into the response."""
    if not responses:
        return []
    tokenizer = lm.tokenizer
    if getattr(tokenizer, "is_fast", False):
        enc = tokenizer(list(responses), add_special_tokens=False, return_offsets_mapping=True)
        return [[end for _, end in offsets] for offsets in enc["offset_mapping"]]
    ends = []  # a slow tokenizer has no offsets: the length of each decoded prefix
    for response in responses:
        ids = lm.response_ids(response)[:-1]
        ends.append([len(tokenizer.decode(ids[: t + 1])) for t in range(len(ids))])
    return ends
