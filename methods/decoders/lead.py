"""``lead``: a trivial baseline that writes without a model: the first N words of the item's
input, N the median length in words of the user's profile outputs (rounded half up, at least
one). A user without profile outputs gets the median over every user's profile outputs.

On Pref-LaMP the first words of the abstract are a strong title (the abstract's opening often
names the task and the method), so a method that does not beat ``lead`` on ROUGE has learnt
little. It is no distribution over texts (``policy = False``): no policy accuracy.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from pytest_prefalign.api import CaseContext, Decoder, Item, ProfileEntry


class LeadDecoder(Decoder):
    name = "lead"
    needs = frozenset()
    policy = False  # writes without a model: no log-likelihood, no policy accuracy
    order = 3  # position in the default method list: after base and the ICL decoders

    def generate(self, ctx: CaseContext, items: Sequence[Item]) -> list[str]:
        profiles = ctx.data.profiles
        everyone = lead_length([e for entries in profiles.values() for e in entries])
        out = []
        for item in items:
            n = lead_length(profiles.get(item.user, [])) or everyone or 1
            out.append(" ".join(item.input.split()[:n]))
        return out


def lead_length(entries: Sequence[ProfileEntry]) -> int | None:
    """The median length in words of the entries' outputs, rounded half up (at least one);
    None without entries."""
    lengths = [len(e.output.split()) for e in entries]
    if not lengths:
        return None
    return max(1, math.floor(statistics.median(lengths) + 0.5))
