"""``profile_copy``: a trivial baseline that writes without a model: the output of the user's
profile entry whose input is nearest the item's input, by BM25 (``bm25s``, over the same
per-user index as ``icl_rag``). Ties go to the earlier profile entry; a user without a profile
gets an empty output (ROUGE 0).

It asks whether a method writes better than the user's own most similar past text. It is no
distribution over texts (``policy = False``): no policy accuracy.
"""

from __future__ import annotations

from collections.abc import Sequence

from prefalign_methods.decoders.icl import RAGDecoder
from pytest_prefalign import bm25
from pytest_prefalign.api import CaseContext, Decoder, Item, ProfileEntry


class ProfileCopyDecoder(Decoder):
    name = "profile_copy"
    needs = frozenset()
    policy = False  # writes without a model: no log-likelihood, no policy accuracy
    order = 4  # position in the default method list: after lead

    def generate(self, ctx: CaseContext, items: Sequence[Item]) -> list[str]:
        return [self.nearest(ctx, it.user, it.input) for it in items]

    @staticmethod
    def nearest(ctx: CaseContext, user: str, text: str) -> str:
        """The output of the user's profile entry nearest ``text``."""
        profile: list[ProfileEntry] = ctx.data.profiles.get(user, [])
        if not profile:
            return ""
        # the first of the best-scored entries (bm25.ranking's order)
        return profile[int(bm25.ranking(RAGDecoder.index(ctx, user, profile), text)[0])].output
