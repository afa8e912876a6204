"""A reward method as decoders and metrics see it: every call checked.

Third-party code may raise, return NaN or infinity, or return the wrong number of values; any
of these fails the test that used it with a message naming the method, the call and what came
back, whichever decoder made the call. The other tests of the run go on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pytest_prefalign.errors import PrefalignError


class GuardedReward:
    """Wraps a fitted reward method; attributes other than the checked calls pass through."""

    def __init__(self, inner: Any, name: str) -> None:
        self._inner = inner
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self._inner, method)(*args)
        except PrefalignError:
            raise
        except Exception as exc:
            raise PrefalignError(
                f"reward method {self._name!r} raised in {method}: {type(exc).__name__}: {exc}"
            ) from None

    def score(
        self, lm: Any, users: Sequence[str], prompts: Sequence[str], responses: Sequence[str]
    ) -> np.ndarray:
        out = self._call("score", lm, users, prompts, responses)
        return finite_array(out, len(responses), f"reward method {self._name!r} score", users)

    def prefix_rewards(
        self, lm: Any, users: Sequence[str], prompts: Sequence[str], responses: Sequence[str]
    ) -> list[np.ndarray]:
        out = list(self._call("prefix_rewards", lm, users, prompts, responses))
        what = f"reward method {self._name!r} prefix_rewards"
        if len(out) != len(responses):
            raise PrefalignError(f"{what} returned {len(out)} arrays, expected {len(responses)}")
        return [finite_array(a, None, what, [users[i]]) for i, a in enumerate(out)]

    def next_token_logprobs(
        self, lm: Any, users: Sequence[str], prompts: Sequence[str], responses: Sequence[str]
    ) -> list[np.ndarray]:
        out = list(self._call("next_token_logprobs", lm, users, prompts, responses))
        what = f"reward method {self._name!r} next_token_logprobs"
        if len(out) != len(responses):
            raise PrefalignError(f"{what} returned {len(out)} arrays, expected {len(responses)}")
        for array in out:
            no_nan(np.asarray(array), what)
        return out

    def reward_from_hidden(self, users: Sequence[str], hidden: Any) -> Any:
        out = self._call("reward_from_hidden", users, hidden)
        what = f"reward method {self._name!r} reward_from_hidden"
        if tuple(out.shape) != tuple(hidden.shape[:-1]):
            raise PrefalignError(
                f"{what} returned shape {tuple(out.shape)}, expected {tuple(hidden.shape[:-1])}"
            )
        if not bool(out.isfinite().all()):
            raise PrefalignError(f"{what} returned non-finite rewards")
        return out

    def logprobs_from_hidden(self, users: Sequence[str], hidden: Any) -> Any:
        out = self._call("logprobs_from_hidden", users, hidden)
        if bool(out.isnan().any()):
            raise PrefalignError(f"reward method {self._name!r} logprobs_from_hidden returned NaN")
        return out


def finite_array(values: Any, n: int | None, what: str, users: Sequence[str]) -> np.ndarray:
    """``values`` as a 1-D float array of length ``n`` (any length if None), all finite."""
    try:
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise PrefalignError(f"{what} returned {type(values).__name__}, not numbers") from None
    if n is not None and arr.shape[0] != n:
        raise PrefalignError(f"{what} returned {arr.shape[0]} values, expected {n}")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        i = int(bad[0])
        user = users[i] if i < len(users) else users[0]
        raise PrefalignError(
            f"{what} returned {arr[i]} at index {i} (user {user!r}; "
            f"{bad.size} non-finite of {arr.shape[0]})"
        )
    return arr


def no_nan(array: np.ndarray, what: str) -> None:
    if np.isnan(array).any():
        raise PrefalignError(f"{what} returned NaN")
