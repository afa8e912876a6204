"""How a user's data is divided into training and test parts and sampled, reproducibly."""

from __future__ import annotations

import math
import zlib
from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


def held_out(n: int, share: Fraction) -> int:
    """How many of ``n`` time-ordered things are the test part: ``share * n`` rounded half up,
    at least one (``n`` = 0 gives 0). Exact arithmetic: 0.3 * 15 is 4.5 and rounds to 5."""
    if n <= 0:
        return 0
    return max(1, math.floor(share * n + Fraction(1, 2)))


def user_rng(seed: int, user: str) -> np.random.Generator:
    """A generator for one user that depends only on the seed and the user's id, so a user's
    sample is the same whichever other users a run holds."""
    import numpy as np

    return np.random.default_rng([seed, zlib.crc32(user.encode("utf-8"))])
