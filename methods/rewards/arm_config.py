"""The ``arm`` reward method's configuration (``--prefalign-option arm.FIELD=VALUE``) and its
check. Apart from the method (``arm``) and its training (``arm_training``), which both read it:
the method is declared, listed and collected without torch, its training imports torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ARMConfig:
    rank: int = 8  # r: width of the adapter between the hidden state and the output head
    beta: float = 1.0  # reward scale: r_u = beta * sum_t log p_arm(y_t); the loss's inverse
    # temperature. 1 keeps log p_arm on the scale GenARM's alpha mixes with the base logits
    epochs: int = 8  # passes over the training pairs (on Pref-LaMP the loss is ~0 by the 5th)
    batch_pairs: int = 16  # pairs per AdamW step
    lr: float = 3e-3  # AdamW learning rate (1e-3 needs twice the epochs; 1e-2 oscillates)
    kl: float = 0.1  # weight of sum_t KL(p_arm || p_base) per response, added to the loss:
    # keeps the ARM inside the base LM's support (without it, the cheapest way to make the base
    # model's own titles unlikely is to move their mass onto junk tokens, which guidance then
    # writes)
    user_l2: float = 1.0  # prior strength on each user's (s_u, z_u): lambda * ||.||^2 / pairs
    weight_decay: float = 1e-4  # AdamW decay of the shared A and B
    seed: int = 0  # initialisation of A and the order of the pairs
    logit_cache_mb: int = 1024  # keep the training tokens' base logits in memory up to this


def check_config(config: ARMConfig) -> None:
    positive = {
        "rank": config.rank,
        "epochs": config.epochs,
        "batch_pairs": config.batch_pairs,
        "beta": config.beta,
        "lr": config.lr,
    }
    for name, value in positive.items():
        if not value > 0:
            raise ValueError(f"arm: {name} must be > 0, got {value}")
    for name in ("kl", "user_l2", "weight_decay", "logit_cache_mb"):
        if getattr(config, name) < 0:
            raise ValueError(f"arm: {name} must be >= 0, got {getattr(config, name)}")
