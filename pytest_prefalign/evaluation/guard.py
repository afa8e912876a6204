"""A reward method as decoders and metrics see it: every call checked.

Third-party code may raise, return NaN or infinity, or return the wrong number of values; any
of these fails the test that used it with a message naming the method, the call and what came
back, whichever decoder made the call. A bad value is named by the record it was computed for:
the test pair and its side, or the generation item whose response it scored. An exception the
method raised keeps its traceback (``MethodFailure``), which the test's report shows below the
message. The other tests of the run go on.

A method written before ``api.Batch`` (``score(lm, users, prompts, responses)``, and so
``prefix_rewards`` and ``next_token_logprobs``) is still called its way, with a
``DeprecationWarning`` (``old_style``).
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_prefalign.errors import MethodFailure, PrefalignError

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.api import Batch, SuiteData

Where = Callable[[int], str]  # position of a call -> what it was computed for


class GuardedReward:
    """Wraps a fitted reward method; attributes other than the checked calls pass through.
    ``data``: the suite's data, to name the record a bad value belongs to; ``vocab``: the base
    model's vocabulary size, the width of a table of log-probabilities (None: not checked)."""

    def __init__(
        self, inner: Any, name: str, data: SuiteData | None = None, vocab: int | None = None
    ) -> None:
        self._inner = inner
        self._name = name
        self._data = data
        self._vocab = vocab

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self._inner, method)(*args)
        except PrefalignError:
            raise
        except Exception as exc:
            raise MethodFailure(
                f"reward method {self._name!r} raised in {method}: {type(exc).__name__}: {exc}"
            ) from exc

    def _call_batch(self, method: str, lm: Any, batch: Batch) -> Any:
        """``method(lm, batch)``, or ``method(lm, users, prompts, responses)`` for a method
        written before ``Batch``."""
        if old_style(getattr(self._inner, method)):
            _warn_old_style(self._name, method)
            return self._call(method, lm, batch.users, batch.prompts, batch.responses)
        return self._call(method, lm, batch)

    def _where(self, batch: Batch) -> Where:
        """Names position ``i`` of a call by its record; looked up only when something is wrong."""
        return lambda i: locate(self._data, batch.users[i], batch.prompts[i], batch.responses[i], i)

    def score(self, lm: Any, batch: Batch) -> np.ndarray:
        out = self._call_batch("score", lm, batch)
        where = self._where(batch)
        return finite_array(out, len(batch), f"reward method {self._name!r} score", where)

    def prefix_rewards(self, lm: Any, batch: Batch) -> list[np.ndarray]:
        out = list(self._call_batch("prefix_rewards", lm, batch))
        what = f"reward method {self._name!r} prefix_rewards"
        if len(out) != len(batch):
            raise PrefalignError(f"{what} returned {len(out)} arrays, expected {len(batch)}")
        where = self._where(batch)
        arrays = [finite_array(a, None, what, _token_of(where, i)) for i, a in enumerate(out)]
        for i, array in enumerate(arrays):
            tokens = len(lm.response_ids(batch.responses[i]))
            if array.shape[0] != tokens:
                raise PrefalignError(
                    f"{what} returned {array.shape[0]} values {where(i)}, expected {tokens}: "
                    f"one per token of lm.response_ids(response), the final eos_id included"
                )
        return arrays

    def next_token_logprobs(self, lm: Any, batch: Batch) -> list[np.ndarray]:
        out = list(self._call_batch("next_token_logprobs", lm, batch))
        what = f"reward method {self._name!r} next_token_logprobs"
        if len(out) != len(batch):
            raise PrefalignError(f"{what} returned {len(out)} arrays, expected {len(batch)}")
        where = self._where(batch)
        for i, array in enumerate(out):
            shape = (len(lm.response_ids(batch.responses[i])), self._vocab)
            log_probabilities(np.asarray(array), shape, what, where, i)
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
        what = f"reward method {self._name!r} logprobs_from_hidden"
        shape = (*hidden.shape[:-1], self._vocab)
        found = tuple(out.shape)
        if len(found) != len(shape) or any(
            e is not None and e != f for e, f in zip(shape, found, strict=True)
        ):
            raise PrefalignError(f"{what} returned shape {found}, expected {_shape(shape)}")
        if bool((out.isnan() | (out == float("inf"))).any()):
            raise PrefalignError(f"{what} returned NaN or +inf (a log-probability is at most 0)")
        return out


def old_style(method: Callable[..., Any]) -> bool:
    """Whether a reward method's bound ``method`` takes ``(lm, users, prompts, responses)``,
    the protocol before ``api.Batch``: four positional parameters or more, and no ``*args``."""
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: called the current way
        return False
    kinds = [p.kind for p in parameters]
    if inspect.Parameter.VAR_POSITIONAL in kinds:
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(kind in positional for kind in kinds) >= 4


def _warn_old_style(name: str, method: str) -> None:
    warnings.warn(
        f"reward method {name!r}: {method}(lm, users, prompts, responses) is the protocol before "
        f"pytest_prefalign.api.Batch; define {method}(lm, batch) (docs/plugins.md)",
        DeprecationWarning,
        stacklevel=4,
    )


def _shape(shape: tuple[int | None, ...]) -> str:
    return "(" + ", ".join("V" if n is None else str(n) for n in shape) + ")"


def log_probabilities(
    array: np.ndarray, shape: tuple[int, int | None], what: str, where: Where, i: int
) -> None:
    """Response ``i``'s table of log-probabilities ``(T, V)`` (V not checked if None): NaN
    and +inf are errors, -inf is a token of probability 0."""
    rows, vocab = shape
    if array.ndim != 2 or array.shape[0] != rows or vocab not in (None, array.shape[1]):
        raise PrefalignError(
            f"{what} returned shape {array.shape} {where(i)}, expected {_shape(shape)}: a row "
            f"per token of lm.response_ids(response), a column per token of the vocabulary"
        )
    bad = np.isnan(array) | (array == np.inf)
    if bad.any():
        t = int(np.flatnonzero(bad.any(axis=1))[0])
        raise PrefalignError(
            f"{what} returned NaN or +inf {where(i)} at token {t} (a log-probability is at most 0)"
        )


def _token_of(where: Where, i: int) -> Where:
    return lambda t: f"{where(i)} at token {t}"


def locate(data: SuiteData | None, user: str, prompt: str, response: str, index: int) -> str:
    """What a scored ``(user, prompt, response)`` was: a side of a test pair, a response
    generated for an item, or (neither) its position in the call."""
    if data is not None:
        for pair in data.test_pairs:
            if (
                pair.user == user
                and pair.prompt == prompt
                and response in (pair.chosen, pair.rejected)
            ):
                side = "chosen" if response == pair.chosen else "rejected"
                return f"for the {side} side of pair {pair.pair_id!r}"
        for item in data.items:
            if item.user == user and item.prompt == prompt:
                return f"for a response to item {item.item_id!r} of user {user!r}"
    return f"at index {index}, user {user!r}"


def numbers(values: Any, n: int | None, what: str) -> np.ndarray:
    """``values`` as a 1-D float array of length ``n`` (any length if None), or a failure
    saying what came."""
    try:
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise PrefalignError(f"{what} returned {type(values).__name__}, not numbers") from None
    if n is not None and arr.shape[0] != n:
        raise PrefalignError(f"{what} returned {arr.shape[0]} values, expected {n}")
    return arr


def finite_array(values: Any, n: int | None, what: str, where: Where) -> np.ndarray:
    """``values`` as a 1-D float array of length ``n`` (any length if None), all finite; the
    first bad value is named by ``where``."""
    arr = numbers(values, n, what)
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        i = int(bad[0])
        raise PrefalignError(
            f"{what} returned {arr[i]} {where(i)} ({bad.size} non-finite of {arr.shape[0]})"
        )
    return arr
