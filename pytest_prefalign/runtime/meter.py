"""What the model's body computed: the token positions it ran, their weight FLOPs and the seconds
spent inside it.

Every forward pass of ``LM`` goes through ``model.base_model`` (prefills, decoding steps, ARGS's
candidate queries, teacher forcing), so two hooks there count all of them. A position costs
``2 x`` the weights of the body's linear layers in multiply-adds (attention's own products over
the cache and the output head, run on few positions, are not counted), which makes
``flops / matmul rate`` a lower bound on the time the same work can take on a machine. The run
file's per-test timings carry a test's share (``forward_tokens``, ``forward_flops``,
``forward_s``); ``benchmarks/bench_main_job.py`` sets them beside the matmul rate.

On a GPU the seconds are those of launching the work (kernels run asynchronously).
"""

from __future__ import annotations

import time
from typing import Any

import torch


class ForwardMeter:
    def __init__(self, body: torch.nn.Module) -> None:
        self.per_token = 2 * sum(
            m.weight.numel() for m in body.modules() if isinstance(m, torch.nn.Linear)
        )
        self.tokens = 0
        self.seconds = 0.0
        self._started: float | None = None
        body.register_forward_pre_hook(self._enter, with_kwargs=True)
        body.register_forward_hook(self._leave)

    def _enter(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs["inputs_embeds"][..., 0]
        self.tokens += int(ids.numel())
        self._started = time.perf_counter()

    def _leave(self, module: Any, args: tuple[Any, ...], output: Any) -> None:
        if self._started is not None:
            self.seconds += time.perf_counter() - self._started
            self._started = None

    def reading(self) -> dict[str, float]:
        """The totals so far, under the names the run file's timings use."""
        return {
            "forward_tokens": float(self.tokens),
            "forward_flops": float(self.tokens * self.per_token),
            "forward_s": self.seconds,
        }

    @staticmethod
    def since(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        """What was counted between two readings."""
        return {name: after[name] - before[name] for name in after}
