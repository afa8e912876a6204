"""The records and interfaces that suites, reward methods and decoders exchange.

This module is imported on every pytest run (through the plugin), so it must stay light: no torch,
no transformers, no numpy at import time. Heavy objects appear here only as annotations.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, overload

from pytest_prefalign.cache import Scope

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
    from pathlib import Path

    import numpy as np
    import torch

    from pytest_prefalign.runtime.lm import LM


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProfileEntry:
    """One past document of a user: what they saw (``input``) and what they wrote (``output``)."""

    doc_id: str
    input: str
    output: str


@dataclass(frozen=True)
class Item:
    """A generation item ``(x, profile_u, y*)``; ``reference`` is None where a suite has no y*."""

    item_id: str
    user: str
    input: str  # the raw input, e.g. the abstract
    prompt: str  # the zero-shot task instruction built from ``input``
    reference: str | None


@dataclass(frozen=True)
class Pair:
    """A preference pair ``(x, y_w, y_l, u)``."""

    pair_id: str
    user: str
    prompt: str
    chosen: str
    rejected: str


@dataclass
class SuiteData:
    """Everything one suite provides for one run, after its loader's rules were applied."""

    suite: str
    source: str  # where the data was read from, for the summary and the run file
    profiles: dict[str, list[ProfileEntry]]
    items: list[Item]
    train_pairs: list[Pair] = field(default_factory=list)
    test_pairs: list[Pair] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)  # rule -> users dropped by it
    provenance: dict[str, Any] = field(default_factory=dict)  # how pairs were made, etc.
    # each record dropped or altered for a fault in the data (``Fault``), in reading order
    faults: list[dict[str, Any]] = field(default_factory=list)

    @property
    def users(self) -> list[str]:
        return sorted(self.profiles)


@dataclass(frozen=True, init=False)
class Batch:
    """What a reward method scores and a decoder teacher-forces: one ``(user, prompt,
    response)`` per position, validated once, where it is made (as many of each, all strings).

    ``Batch(users, prompts, responses)`` takes any sequences and keeps tuples; ``of_pairs``
    takes a side of preference pairs, ``take`` and slicing a part, ``+`` joins two."""

    users: tuple[str, ...]
    prompts: tuple[str, ...]
    responses: tuple[str, ...]

    def __init__(
        self, users: Sequence[str], prompts: Sequence[str], responses: Sequence[str]
    ) -> None:
        columns = {"users": users, "prompts": prompts, "responses": responses}
        for what, values in columns.items():
            if isinstance(values, str):
                raise TypeError(f"Batch: {what} is one string, expected a sequence of them")
        sizes = {what: len(values) for what, values in columns.items()}
        if len(set(sizes.values())) != 1:
            counts = ", ".join(f"{n} {what}" for what, n in sizes.items())
            raise ValueError(f"Batch: {counts}: expected as many of each")
        for what, values in columns.items():
            kept = tuple(values)
            for i, value in enumerate(kept):
                if not isinstance(value, str):
                    raise TypeError(
                        f"Batch: {what}[{i}] is a {type(value).__name__}, expected a string"
                    )
            object.__setattr__(self, what, kept)

    @classmethod
    def of_pairs(cls, pairs: Sequence[Pair], side: Literal["chosen", "rejected"]) -> Batch:
        """One side of each pair, with the pair's user and prompt."""
        responses = [p.chosen if side == "chosen" else p.rejected for p in pairs]
        return cls([p.user for p in pairs], [p.prompt for p in pairs], responses)

    @classmethod
    def of_items(cls, items: Sequence[Item], responses: Sequence[str]) -> Batch:
        """A response to each generation item, with the item's user and prompt."""
        return cls([it.user for it in items], [it.prompt for it in items], responses)

    def __len__(self) -> int:
        return len(self.responses)

    def __iter__(self) -> Iterator[tuple[str, str, str]]:
        """The ``(user, prompt, response)`` of each position."""
        return iter(zip(self.users, self.prompts, self.responses, strict=True))

    def __getitem__(self, part: slice) -> Batch:
        return Batch(self.users[part], self.prompts[part], self.responses[part])

    def __add__(self, other: Batch) -> Batch:
        return Batch(
            self.users + other.users,
            self.prompts + other.prompts,
            self.responses + other.responses,
        )

    def take(self, positions: Iterable[int]) -> Batch:
        """The positions given, in that order."""
        kept = list(positions)
        return Batch(
            [self.users[n] for n in kept],
            [self.prompts[n] for n in kept],
            [self.responses[n] for n in kept],
        )

    def unique(self) -> tuple[Batch, list[int]]:
        """Each ``(user, prompt, response)`` once, in order of first appearance, and for every
        position of this batch its position in that one (a response that several pairs share
        is scored once)."""
        first: dict[tuple[str, str, str], int] = {}  # each triple -> its first position
        for position, triple in enumerate(self):
            first.setdefault(triple, position)
        numbered = {triple: n for n, triple in enumerate(first)}
        return self.take(first.values()), [numbered[triple] for triple in self]

    def with_responses(self, responses: Sequence[str]) -> Batch:
        """The same users and prompts with other responses (as many)."""
        return Batch(self.users, self.prompts, responses)


class DataError(ValueError):
    """A malformed record: names the file, the record and the field; ``record_id`` is the
    record's own id where it has one (an anthology id, a user id)."""

    def __init__(
        self,
        file: str | Path,
        record: str | int,
        field: str,
        problem: str,
        *,
        record_id: str | None = None,
    ) -> None:
        self.file, self.record, self.field, self.problem = str(file), record, field, problem
        self.record_id = record_id
        super().__init__(f"{file}: record {record}: field {field!r}: {problem}")

    def fault(self, rule: str) -> dict[str, Any]:
        """The error as a ``Fault`` of the record dropped or altered under ``rule``."""
        return fault(self.file, self.record, self.record_id, self.field, self.problem, rule)


FAULT_FIELDS = ("file", "line", "id", "field", "reason", "rule")


def fault(
    file: str, line: str | int | None, record_id: str | None, field: str, reason: str, rule: str
) -> dict[str, Any]:
    """A fault in the data, as the run file keeps it: ``file``; ``line``, the line number in
    a JSON Lines or CSV file, the position (from 0) in a JSON list or a dataset split, None
    where the record is known by its id only; ``id``, the record's own id or None; ``field``;
    ``reason``, what is wrong and what was done; ``rule``, the count it is part of in
    ``SuiteData.dropped`` (``record:bad_paper``) or what altered it (``context:prompt``)."""
    return dict(zip(FAULT_FIELDS, (file, line, record_id, field, reason, rule), strict=True))


def describe_fault(fault: dict[str, Any]) -> str:
    """One line for a fault: ``file:line: id 'X': field 'f': reason``."""
    where = str(fault.get("file") or "?")
    if fault.get("line") is not None:
        where += f":{fault['line']}"
    ident = f" id {fault['id']!r}:" if fault.get("id") is not None else ""
    return f"{where}:{ident} field {fault.get('field')!r}: {fault.get('reason')}"


class DataNotFound(FileNotFoundError):
    """A suite's data is in none of the places searched; the message lists them."""


# --------------------------------------------------------------------------------------------
# Interfaces
# --------------------------------------------------------------------------------------------


class Suite(Protocol):
    """A registered suite: finds and validates its data and turns it into records."""

    name: str
    description: str
    licence: str
    source: str  # the sub-folder of the data directory (or dataset id) it reads

    def instruction(self, input: str) -> str:
        """The zero-shot task prompt for one input."""

    def example(self, entry: ProfileEntry) -> str:
        """One profile entry shown as an in-context example."""

    def load(self, data_dir: Path | None, *, limit: int | None, options: Any) -> SuiteData:
        """Read and validate the data; ``limit`` is a number of users. Pairs whose rejected side
        needs a model are made in ``build_pairs``. ``options``: the suite's optional ``options``
        dataclass built from its ``suite.toml`` (``suite_options``), else the strings as a
        dict."""

    def build_pairs(self, data: SuiteData, reference: LM, cache_dir: Path) -> None:
        """Fill ``data.train_pairs`` and ``data.test_pairs`` (a no-op where ``load`` did).

        ``reference`` is the model the suite's optional ``writer(data)`` names (a model source
        such as ``embedded:gemma3-270m``: the same whatever the sizes evaluated), or the suites'
        reference generator (the 135m size) for a suite without one or where it returns None.
        A suite whose pairs a model wrote says so in ``data.provenance["design"]``
        (``label``, ``note``, ``writer_fingerprint``): the leaderboard marks the rows of that
        very model."""


class SuiteDeclarations:
    """What a suite may declare beyond ``Suite``'s members, each with the default that a suite
    which leaves it out gets. A suite need not subclass this: ``declared`` reads these
    defaults for one that does not (the built-in suites do not)."""

    # its options, a frozen dataclass built from each ``suite.toml``'s ``[options]`` strings
    # and checked (``suite_options``); None: ``load`` receives the strings as a dict
    options: ClassVar[type | None] = None
    # whether it needs a data folder holding ``source``, or a function of its ``suite.toml``
    # options that says so; where not, ``load`` may receive None
    requires_data_dir: ClassVar[bool | Callable[[Mapping[str, str]], bool]] = True
    # it generates its records, reading no data files (``prefalign data`` says so)
    embedded: ClassVar[bool] = False
    # the module that builds its data folder for ``prefalign data fetch`` (``add_arguments``,
    # ``hosts``, ``build``: docs/suites.md, "Writing a suite")
    fetcher: ClassVar[str | None] = None
    # the ``"module:function"`` that ``prefalign data build-pairs SUITE`` runs to write its
    # released pairs
    pairs_builder: ClassVar[str | None] = None
    # the data's terms, kept with every result and shown in the report
    attribution: ClassVar[str | None] = None
    # a method ``writer(data)``: the model source ``build_pairs`` writes this data's pairs
    # with; None, or a method that returns None: the suites' reference generator
    writer: ClassVar[Callable[[SuiteData], str | None] | None] = None
    # a method ``example_turn(entry)``: a profile entry as an earlier ``(user turn, answer)``
    # of the in-context decoders' conversation; None: ``(instruction(entry.input), entry.output)``
    example_turn: ClassVar[Callable[[ProfileEntry], tuple[str, str]] | None] = None


def requires_data_dir(suite: object, options: Mapping[str, str]) -> bool:
    """Whether a suite needs a data folder: its ``requires_data_dir``, a bool or a function of
    the suite's options (pref_lamp does without one when it reads the original LaMP-5 files)."""
    requires = declared(suite, "requires_data_dir")
    return bool(requires(options) if callable(requires) else requires)


class RewardMethod:
    """A reward method ``r_u(x, y)``, trained on a suite's training pairs.

    Capabilities are declared in ``capabilities`` (see ``CAPABILITIES``: ``"prefix"``,
    ``"hidden"``, ``"next_token"``, ``"hidden_logprobs"``); a decoder that needs one that is
    missing refuses with a message, before the run starts. The class attributes below
    ``name`` are optional: a reward method that does not subclass this one gets their
    defaults (``declared``).
    """

    name: ClassVar[str] = "?"
    # what it offers beyond ``score`` (``CAPABILITIES``); empty: score only
    capabilities: ClassVar[frozenset[str]] = frozenset()
    # its options, a dataclass set with ``--prefalign-option NAME.FIELD=VALUE``: the run then
    # makes the method with ``config=Config(...)``; None: it has no options
    Config: ClassVar[type | None] = None
    # the reward-guided decoder it runs with by default (arm: genarm); None: the first, by
    # ``Decoder.order``, whose needs it meets
    default_decoder: ClassVar[str | None] = None
    # False: no row of the default method list (a method made for one suite); it runs when named
    in_default_methods: ClassVar[bool] = True
    # True: its rewards are in nats by construction and keep their scale, not standardised
    # on its training responses (evaluation/scale.py)
    rewards_in_nats: ClassVar[bool] = False
    # set by ``fit``: True when it trained, False when it loaded what an earlier run trained;
    # None: the run judges by whether its cache folder held files
    trained: bool | None = None
    # whether the method reads the users' profiles (``SuiteData.profiles``, their own earlier
    # documents): the evaluation hands them to ``use_profiles`` before ``fit``, and they enter
    # the fitted method's cache key
    needs_profiles: ClassVar[bool] = False

    def fingerprint(self) -> str:
        """A stable string naming the method's configuration (part of its cache key)."""
        raise NotImplementedError

    def use_profiles(self, profiles: Mapping[str, Sequence[ProfileEntry]]) -> None:
        """Every user's profile, given before ``fit`` to a method that ``needs_profiles``."""
        raise NotImplementedError(f"reward method {self.name!r} does not read profiles")

    def fit(self, lm: LM, pairs: Sequence[Pair], cache_dir: Path) -> None:
        """Train (or load the cached parameters) on the training pairs."""
        raise NotImplementedError

    def score(self, lm: LM, batch: Batch) -> np.ndarray:
        """One reward per (user, prompt, response) of ``batch``, shape ``(len(batch),)``."""
        raise NotImplementedError


# --------------------------------------------------------------------------------------------
# Capabilities: what a reward method can do beyond ``score``, declared by name in
# ``capabilities`` and reached through these types (``capable``)
# --------------------------------------------------------------------------------------------


class PrefixRewards(Protocol):
    """``"prefix"``: ``r_u(x, y_<=t)`` for every token ``t`` of each response (the final
    ``eos_id`` included), one array per response; the last value equals ``score``."""

    def prefix_rewards(self, lm: LM, batch: Batch) -> list[np.ndarray]: ...


class HiddenRewards(Protocol):
    """``"hidden"``: the reward as a function of the base LM's final hidden state: rewards
    ``(N, ...)`` from states ``(N, ..., H)``, one user per leading row, on their device."""

    def reward_from_hidden(self, users: Sequence[str], hidden: torch.Tensor) -> torch.Tensor: ...


class NextTokenLogprobs(Protocol):
    """``"next_token"``: an autoregressive RM (GenARM): ``log p_arm_u(. | x, y_<t)`` ``(T_y, V)``
    over the base model's vocabulary for each response position."""

    def next_token_logprobs(self, lm: LM, batch: Batch) -> list[np.ndarray]: ...


class HiddenLogprobs(Protocol):
    """``"hidden_logprobs"``: the ARM as a head on the base LM's hidden states: ``log p_arm``
    ``(N, ..., V)`` from the states that predict the next token ``(N, ..., H)``."""

    def logprobs_from_hidden(self, users: Sequence[str], hidden: torch.Tensor) -> torch.Tensor: ...


CAPABILITIES: dict[str, type] = {
    "prefix": PrefixRewards,
    "hidden": HiddenRewards,
    "next_token": NextTokenLogprobs,
    "hidden_logprobs": HiddenLogprobs,
}


@overload
def capable(reward: RewardMethod | None, capability: Literal["prefix"]) -> PrefixRewards | None: ...
@overload
def capable(reward: RewardMethod | None, capability: Literal["hidden"]) -> HiddenRewards | None: ...
@overload
def capable(
    reward: RewardMethod | None, capability: Literal["next_token"]
) -> NextTokenLogprobs | None: ...
@overload
def capable(
    reward: RewardMethod | None, capability: Literal["hidden_logprobs"]
) -> HiddenLogprobs | None: ...
def capable(reward: RewardMethod | None, capability: str) -> Any:
    """``reward`` as the type of ``capability`` (one of ``CAPABILITIES``) when it declares it,
    else None: how a decoder reaches what a reward method can do beyond ``score``."""
    if capability not in CAPABILITIES:
        raise KeyError(f"unknown capability {capability!r}; known: {', '.join(CAPABILITIES)}")
    if reward is None or capability not in declared(reward, "capabilities"):
        return None
    return reward


@dataclass(frozen=True)
class DecodeOptions:
    """The options every decoder takes. A decoder with options of its own declares them as a
    subclass, its ``Options``; each is set on the command line (``--prefalign-option
    args.k=5``, or ``max_new_tokens=32`` for every decoder that has it) or in the ini value
    ``prefalign_options``, and checked in ``__post_init__`` (a ``ValueError`` there becomes a
    usage error naming the option)."""

    max_new_tokens: int = 24  # a title fits; generation also stops at the end of the first line
    # sequences per forward pass. On this project's 2-core CPU a pass reads all the weights
    # whatever its rows: a decode step of 48 rows ran 188 tokens/s against 110 at 16, an ARGS
    # step (10 candidates a row) 418 against 332; prefills cut their passes by length anyway
    batch_size: int = 48

    def __post_init__(self) -> None:
        for name, value in (
            ("max_new_tokens", self.max_new_tokens),
            ("batch_size", self.batch_size),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")


# --------------------------------------------------------------------------------------------
# The independent judge of the win rates over base
# --------------------------------------------------------------------------------------------

INDEPENDENT_JUDGE = "independent"  # the name the evaluation asks the registry for


class JudgeUnavailable(RuntimeError):
    """A judge that cannot be built for a (suite, size); the message says why (the report
    shows it in place of the independent win rate)."""


class FittedJudge(Protocol):
    """A judge built for one (suite, size)."""

    @property
    def description(self) -> str:
        """What it is, for the report (its encoder, its training pairs and users)."""

    def score(self, batch: Batch) -> np.ndarray:
        """One score per (user, prompt, response) of ``batch``, shape ``(len(batch),)``."""


class Judge(Protocol):
    """The independent judge of the win rates over ``base``: a reward model of another family
    than the methods it judges (docs/report.md). A plugin provides it with
    ``registry.add_judge(INDEPENDENT_JUDGE, judge)``; the built-in one is
    ``prefalign_methods.rewards.judge``, registered through its entry point like any method."""

    def fit(self, ctx: CaseContext) -> FittedJudge:
        """The judge of ``ctx``'s (suite, size), trained on its training pairs (memoised in
        ``ctx.shared``); raises ``JudgeUnavailable`` when it cannot be built."""

    def identity(self) -> dict[str, Any]:
        """What the judge is, short of its training pairs and its code (both keyed
        separately): its configuration and the versions of what it loads. Part of the key of
        each reward-guided test's results."""


# S_u(y|x) from the token log-likelihoods: their sum or their mean (docs/metrics.md)
REDUCTIONS = ("sum", "mean")
DEFAULT_REDUCE = "sum"  # the pairs are matched in length, so the sum is not decided by it


class Decoder:
    """Turns the base LM, optionally a reward method, and a user into text.

    A decoder defines ``generate``, and ``loglik`` or ``logliks`` where it is a policy; the
    class attributes below ``name`` are optional: a decoder that does not subclass this one
    gets their defaults (``declared``).
    """

    name: ClassVar[str] = "?"
    # the reward capabilities it needs (``"score"``: any reward method); empty: it takes none
    needs: ClassVar[frozenset[str]] = frozenset()
    # its options, a frozen subclass of ``DecodeOptions``; ``ctx.options`` is an instance
    Options: ClassVar[type[DecodeOptions]] = DecodeOptions
    # whether it is a distribution over texts with a policy score (policy accuracy); False:
    # a baseline that writes without a model (``lead``), scored by ROUGE only
    policy: ClassVar[bool] = True
    # the option of ``Options`` that sets how strongly the reward guides (ARGS's ``w``,
    # GenARM's ``alpha``), chosen on validation items of the training users, never the test
    # items (docs/metrics.md, "Working points"); None: the decoder has nothing to choose
    strength: ClassVar[str | None] = None
    # the values a run chooses ``strength`` from
    strengths: ClassVar[tuple[float, ...]] = ()
    # its place in the default method list, lowest first (base 0, args 10, bon 30); ties by name
    order: ClassVar[int] = 100
    # the reward method it runs with by default when no reward method picks it (bon:
    # per_user_bt); None: the first, by name, whose capabilities meet its needs
    default_reward: ClassVar[str | None] = None
    # which of ``loglik`` and ``logliks`` gives its policy score; a subclass gets it from the
    # one it defines itself (``logliks`` where it defines both), else from its parent; None:
    # it defines neither
    scored_by: ClassVar[Literal["loglik", "logliks"] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """``scored_by`` from the policy score the new class defines itself, unless it sets
        ``scored_by`` too: a subclass of a built-in decoder that redefines only ``loglik`` is
        scored by it, not by the built-in's ``logliks``."""
        super().__init_subclass__(**kwargs)
        own = vars(cls)
        if "scored_by" not in own and ("logliks" in own or "loglik" in own):
            cls.scored_by = "logliks" if "logliks" in own else "loglik"

    def generate(self, ctx: CaseContext, items: Sequence[Item]) -> list[str]:
        """One output text per item."""
        raise NotImplementedError

    def loglik(self, ctx: CaseContext, batch: Batch) -> np.ndarray:
        """``S_u(y|x)``: the teacher-forced log-likelihood of each response under the decoder's
        guided next-token distribution (reduced by ``ctx.reduce``, sum or mean). A decoder
        defines this or ``logliks``; by default, ``logliks``'s figure for ``ctx.reduce``."""
        if type(self).logliks is Decoder.logliks:
            raise NotImplementedError(f"decoder {self.name!r} defines neither loglik nor logliks")
        return self.logliks(ctx, batch)[ctx.reduce]

    def logliks(self, ctx: CaseContext, batch: Batch) -> dict[str, np.ndarray]:
        """``S_u(y|x)`` under every reduction (``REDUCTIONS``: ``{"sum": ..., "mean": ...}``),
        the figures a run file keeps. By default ``loglik`` once per reduction; a decoder whose
        score is built from per-token log-likelihoods defines this instead, so that one pass of
        the model gives both."""
        if type(self).loglik is Decoder.loglik:
            raise NotImplementedError(f"decoder {self.name!r} defines neither loglik nor logliks")
        return {how: self.loglik(replace(ctx, reduce=how), batch) for how in REDUCTIONS}


def policy_scores(decoder: Decoder, ctx: CaseContext, batch: Batch) -> dict[str, np.ndarray]:
    """``S_u(y|x)`` under every reduction, from the method the decoder's ``scored_by`` names:
    ``loglik`` once per reduction, or ``logliks`` once."""
    scored_by = declared(decoder, "scored_by")
    if scored_by == "loglik":
        return {how: decoder.loglik(replace(ctx, reduce=how), batch) for how in REDUCTIONS}
    if scored_by == "logliks":
        return decoder.logliks(ctx, batch)
    raise NotImplementedError(
        f"decoder {decoder.name!r} defines neither loglik nor logliks (a decoder that does not "
        "subclass api.Decoder names the one it defines in scored_by)"
    )


@dataclass
class CaseContext:
    """What a decoder works with for one (method, suite, size) test."""

    lm: LM
    suite: Suite
    data: SuiteData
    reward: RewardMethod | None
    options: Any = field(default_factory=DecodeOptions)  # the decoder's ``Options``
    seed: int = 0  # ICL example choice and sampling
    reduce: str = DEFAULT_REDUCE  # S_u(y|x): sum (or mean) of the token log-likelihoods
    # what the methods of one (suite, size) share, e.g. the base model's log-likelihoods of the
    # test pairs: each method keeps its memo in a ``cache.Slot`` of its own
    shared: Scope = field(default_factory=lambda: Scope("case"))


# --------------------------------------------------------------------------------------------
# Declarations: each optional attribute of a suite, a decoder or a reward method is declared
# once, with its type, its default and what it means, in the class that owns it above; every
# reader goes through ``declared``. docs/plugins.md lists them all ("Every declaration"),
# checked against these classes by tests/test_plugin_contract.py.
# --------------------------------------------------------------------------------------------

DECLARING: tuple[type, ...] = (SuiteDeclarations, Decoder, RewardMethod)
# each optional attribute -> the class that declares it (``name`` is required of every plugin)
DECLARED: dict[str, type] = {
    attribute: owner
    for owner in DECLARING
    for attribute in owner.__annotations__
    if attribute != "name"
}


def declared(obj: object, name: str) -> Any:
    """What ``obj`` (a suite, or a decoder's or reward method's class or instance) declares as
    ``name``, else the default its declaring class gives: the one reader of a plugin's optional
    attributes, so that a plugin which does not subclass ``SuiteDeclarations``, ``Decoder`` or
    ``RewardMethod`` gets the same defaults as one that does."""
    if name not in DECLARED:
        raise KeyError(f"{name!r} is not an optional attribute declared in api.py")
    return getattr(obj, name, vars(DECLARED[name])[name])
