"""Whether two runs can be compared at all, before any metric is: the one check that both the
pytest gate (plumbing/gating.py) and ``prefalign compare`` run, so that they agree on every case
(docs/ci-gating.md).

Two things are checked. Which tests the runs share (``coverage``): none is an error, and so is
a baseline test the current run lacks (a renamed method, another size, a deselected test). And,
for each shared test, that its two results were computed on the same thing
(``case_differences``): the same pair and item ids (always required), the same data under those
ids, the same model weights, the same environment and the same settings (the policy score's
reduction, which defines policy accuracy, and the seed of the sampled methods). A difference of
one of the ``KINDS`` may be allowed when it is intended (a torch upgrade whose effect the gate
should measure, say); it is then stated, never silent. Other method options (a decoder's ``k``,
a reward method's configuration) are what a change under the gate may well be: they are
compared, and stated.

The runs that ``prefalign merge`` joins (a run's shards) and ``prefalign pool`` pools (a
design's folds) are checked here too, by the same ``case_differences`` (``check_like_for_like``),
with the configuration, code and parts they must share, and their outcomes are joined here
(``joined_outcomes``): one place says what "like for like" is.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_prefalign.runs.header import OUTCOMES, RunOutcomes
from pytest_prefalign.runs.parts import Record, Release
from pytest_prefalign.runs.records import CaseResult, Key, RunFile

# what may be allowed: other data under the same ids, another model, another environment, and
# baseline tests missing from the current run
KINDS = ("data", "model", "environment", "settings", "missing")
STATED = "options"  # a difference of this kind is stated, never refused
# decoder options that change how the work is batched, not a figure
NOT_OPTIONS = ("batch_size",)
# the environment entries that must match (the run file records python too, for information)
ENVIRONMENT = ("pytest-prefalign", "torch", "transformers", "device", "dtype")
# the configuration every shard of a run and every fold of a design must share (``args``, and a
# shard's ``shard``, are each run's own)
SHARED_CONFIG = ("methods", "sizes", "limit", "reduce", "seed", "guidance", "options")
RESAVE = (
    "run files before version 2 do not record it: save the baseline again with this version "
    "(--prefalign-save)"
)


class RunMismatch(ValueError):
    """The two runs cannot be compared; the message says what differs."""


@dataclass(frozen=True)
class Difference:
    """Why one test's two results are not like for like; ``kind`` is one of ``KINDS``."""

    kind: str
    text: str
    unverified: bool = False  # a side does not record what the check needs


def parse_allow(text: str) -> frozenset[str]:
    """``data,environment`` -> the kinds of difference to allow (an ``argparse`` type)."""
    import argparse

    kinds = {part.strip() for part in text.split(",") if part.strip()}
    unknown = sorted(kinds - set(KINDS))
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(
            f"cannot allow {', '.join(map(repr, unknown)) or repr(text)}: "
            f"expected a comma-separated list of {', '.join(KINDS)}"
        )
    return frozenset(kinds)


def key_text(key: Key | Sequence[str]) -> str:
    return f"{key[1]} on {key[0]} ({key[2]})"


# --------------------------------------------------------------------------------------------
# Which tests the runs share
# --------------------------------------------------------------------------------------------


def coverage(
    baseline: Iterable[Key],
    current: Iterable[Key],
    allow: Collection[str] = (),
    *,
    gated: bool = True,
    gates: Iterable[str] = (),
    compared: Iterable[str] = (),
) -> tuple[list[str], list[str]]:
    """``(problems, notes)`` about which tests the runs share. Nothing shared is a problem
    (with what each run holds, and the likely reason); a baseline test the current run lacks is
    a problem when the comparison is ``gated`` and ``missing`` is not allowed, else a note; a
    test new to the baseline is a note. A run-wide gate (``metric:Npp``, in ``gates``) whose
    metric is not among the ``compared`` ones is a problem (``idle_gates``)."""
    old, new = set(baseline), set(current)
    only_old, only_new = sorted(old - new), sorted(new - old)
    if not old & new:
        return [nothing_shared(sorted(old), sorted(new))], []
    problems, notes = idle_gates(gates, compared), []
    if only_old:
        text = f"in the baseline, not compared in this run: {_keys(only_old)}"
        if "missing" in allow:
            notes.append(f"{text} (allowed: missing)")
        elif gated:
            problems.append(f"{text} (not run, deselected, renamed, or failed before a result)")
        else:
            notes.append(text)
    if only_new:
        notes.append(f"new, not in the baseline: {_keys(only_new)}")
    return problems, notes


def idle_gates(gates: Iterable[str], compared: Iterable[str]) -> list[str]:
    """A run-wide gate (``metric:Npp``) on a metric that no shared test has in both runs
    checked nothing: a problem, not a pass (a suite without pairs has no accuracies; a row
    without a policy, such as ``lead``, has none either, but another row should)."""
    seen = set(compared)
    return [
        f"the gate {gate} compared nothing: no test shared with the baseline has "
        f"{gate.split(':')[0]} in both runs"
        for gate in gates
        if gate.split(":")[0] not in seen
    ]


def nothing_shared(old: Sequence[Key], new: Sequence[Key]) -> str:
    """Why nothing was compared: what each side holds and what differs between them."""
    text = (
        "nothing was compared: the baseline and this run share no (suite, method, size); "
        f"the baseline has {_keys(old) or 'no result'}, this run {_keys(new) or 'no result'}"
    )
    for index, what in ((2, "model size"), (1, "method"), (0, "suite")):
        rest = [i for i in range(3) if i != index]
        same = {tuple(k[i] for i in rest) for k in old} & {tuple(k[i] for i in rest) for k in new}
        if same:
            sides = (sorted({k[index] for k in old}), sorted({k[index] for k in new}))
            return f"{text} (another {what}: {', '.join(sides[0])} in the baseline, " + (
                f"{', '.join(sides[1])} in this run)"
            )
    return text


def _keys(keys: Sequence[Key]) -> str:
    return ", ".join(key_text(k) for k in keys)


# --------------------------------------------------------------------------------------------
# One test's two results
# --------------------------------------------------------------------------------------------


def check_case(old: CaseResult, new: CaseResult, allow: Collection[str] = ()) -> list[Difference]:
    """Raise ``RunMismatch`` when the two results of one test cannot be compared: other pair
    or item ids, or a difference of a kind not in ``allow``. Returns the allowed differences,
    which the caller states."""
    check_same_ids(old, new)
    differences = case_differences(old, new)
    refused = [d for d in differences if d.kind not in allow and d.kind != STATED]
    if refused:
        raise RunMismatch(
            f"{key_text(new.key)}: " + "; ".join(d.text for d in refused) + _hint(refused)
        )
    return differences


def _hint(refused: Sequence[Difference]) -> str:
    kinds = ",".join(dict.fromkeys(d.kind for d in refused))
    if any(d.unverified for d in refused):
        return f" ({RESAVE}; or allow what cannot be checked: {kinds})"
    return f" (refresh the baseline, or allow the difference if it is intended: {kinds})"


def case_differences(old: CaseResult, new: CaseResult) -> list[Difference]:
    """Every way the two results differ in what they were computed on, beyond their ids."""
    return [
        *_data(old, new),
        *_model(old, new),
        *_environment(old, new),
        *_settings(old, new),
        *_options(old, new),
    ]


def check_same_ids(old: CaseResult, new: CaseResult) -> None:
    """Refuse a test whose runs were made on different pair (or item) ids."""
    for kind, section in (("pair", "pairs"), ("item", "items")):
        before = {str(r.record_id) for r in getattr(old, section)}
        after = {str(r.record_id) for r in getattr(new, section)}
        only_old, only_new = sorted(before - after), sorted(after - before)
        if only_old or only_new:
            raise RunMismatch(
                f"{key_text(new.key)}: the runs were made on different {kind}s: "
                f"{len(only_old)} of the baseline's {len(before)} {kind} ids are not in the "
                f"current run{_examples(only_old)} and {len(only_new)} of the current run's "
                f"{len(after)} are not in the baseline{_examples(only_new)} (other data or "
                "another --prefalign-limit?)"
            )


def _data(old: CaseResult, new: CaseResult) -> list[Difference]:
    """Same ids, other contents: per record where both runs have digests, and the training
    pairs and profiles from the data fingerprint."""
    before, after = old.data.fingerprint, new.data.fingerprint
    if not before or not after:
        side = "baseline" if not before else "current run"
        text = f"the {side} records no data fingerprint, so the data cannot be checked"
        return [Difference("data", text, unverified=True)]
    found = _releases(old.data.provenance.pairs_release, new.data.provenance.pairs_release)
    for kind, section in (("pair", "pairs"), ("item", "items")):
        changed = _changed(getattr(old, section), getattr(new, section))
        if changed:
            total = len(getattr(new, section))
            found.append(
                f"{len(changed)} of {total} {kind}s have other contents under the same ids"
                f"{_examples(changed)}"
            )
    if before.train_pairs != after.train_pairs:
        found.append("the training pairs differ")
    if before.profiles != after.profiles:
        found.append("the profiles differ")
    if not found and before.all != after.all:
        found.append("the data fingerprints differ")
    if not found:
        return []
    return [Difference("data", "other data: " + ", ".join(found))]


def _releases(before: Release | None, after: Release | None) -> list[str]:
    """The released pairs each run read (a suite's ``pairs_release``), where they differ: both
    checksums named, or which run's pairs were not released."""
    if before is None and after is None:
        return []

    def named(note: Release | None, side: str) -> str:
        if note is None:
            return f"the {side}'s pairs were written by the run, not released"
        return f"the {side}'s released pairs {note.version} (sha256 {note.sha256})"

    if before is None or after is None or before.sha256 != after.sha256:
        return [f"{named(before, 'baseline')}, {named(after, 'current run')}"]
    return []


def _changed(old: Sequence[Record], new: Sequence[Record]) -> list[str]:
    """Ids whose record digests differ between the runs (records without a digest: none)."""
    digests = {str(r.record_id): r.digest for r in old}
    return sorted(
        str(r.record_id)
        for r in new
        if r.digest and digests.get(str(r.record_id)) not in (None, r.digest)
    )


def _model(old: CaseResult, new: CaseResult) -> list[Difference]:
    """Another model: its name, or its weights (and tokenizer) where both runs record them."""
    name_old, name_new = old.model.name, new.model.name
    if name_old != name_new:
        return [
            Difference("model", f"another model: {name_old!r} in the baseline, {name_new!r} now")
        ]
    weights_old, weights_new = old.model.weights, new.model.weights
    if not weights_old or not weights_new:
        side = "baseline" if not weights_old else "current run"
        text = f"the {side} records no model weights, so only the model's name was checked"
        return [Difference("model", text, unverified=True)]
    if weights_old != weights_new:
        return [
            Difference(
                "model",
                f"another model: {name_new!r} with other weights or tokenizer "
                f"({weights_old} in the baseline, {weights_new} now)",
            )
        ]
    return []


def _environment(old: CaseResult, new: CaseResult) -> list[Difference]:
    """Another environment: a version of the plugin, torch or transformers, the device or the
    dtype."""
    if not old.environment.recorded or not new.environment.recorded:
        side = "baseline" if not old.environment.recorded else "current run"
        text = f"the {side} records no environment, so it cannot be checked"
        return [Difference("environment", text, unverified=True)]
    before, after = old.environment.named(), new.environment.named()
    changed = [
        f"{name} {before[name]} -> {after[name]}"
        for name in ENVIRONMENT
        if before[name] != after[name]
    ]
    if not changed:
        return []
    return [Difference("environment", "another environment: " + ", ".join(changed))]


def _settings(old: CaseResult, new: CaseResult) -> list[Difference]:
    """Another policy reduction (``mean`` or ``sum``: another policy accuracy) or another seed
    (other samples for best-of-N and sampled decoding)."""
    if not old.settings.recorded or not new.settings.recorded:  # a file from before them
        side = "baseline" if not old.settings.recorded else "current run"
        return [Difference(STATED, f"the {side} records no policy reduction or seed: unchecked")]
    changed = _changes(old.settings.to_json(), new.settings.to_json(), ("reduce", "seed"))
    return [Difference("settings", "other settings: " + changed)] if changed else []


def _options(old: CaseResult, new: CaseResult) -> list[Difference]:
    """Other decoder options or another configuration of the reward method: stated."""
    names = sorted((old.options.keys() | new.options.keys()) - set(NOT_OPTIONS))
    changed = _changes(old.options, new.options, names)
    if old.reward_fingerprint != new.reward_fingerprint:
        changed += ", " if changed else ""
        changed += f"reward method {old.reward_fingerprint} -> {new.reward_fingerprint}"
    return [Difference(STATED, "other options: " + changed)] if changed else []


def _changes(old: Mapping[str, Any], new: Mapping[str, Any], names: Iterable[str]) -> str:
    return ", ".join(
        f"{name} {old.get(name)} -> {new.get(name)}"
        for name in names
        if old.get(name) != new.get(name)
    )


def _examples(ids: Sequence[str]) -> str:
    return f" (e.g. {', '.join(map(repr, ids[:3]))})" if ids else ""


# --------------------------------------------------------------------------------------------
# Runs joined into one: a run's shards (``prefalign merge``), a design's folds (``prefalign pool``)
# --------------------------------------------------------------------------------------------

Runs = Sequence[tuple[Path, RunFile]]  # (where each was read, the run)


def check_parts(
    parts: Sequence[tuple[Path, int, int]],
    *,
    first: int,
    noun: str,
    label: Callable[[int, int], str],
    split: str,
    error: type[Exception],
) -> None:
    """The run files of the parts of a whole (``(path, index, count)``: the shards of a run,
    the folds of a design): one count, each part once, none missing (indices ``first`` to
    ``first + count - 1``); else ``error``, naming the files and the parts by ``label``."""
    counts = {count for _, _, count in parts}
    if len(counts) > 1:
        raise error(f"{split}: " + ", ".join(f"{p} is {label(k, n)}" for p, k, n in parts))
    given: dict[int, Path] = {}
    for path, index, count in parts:
        if index in given:
            raise error(f"{path}: {label(index, count)} is given twice (also {given[index]})")
        given[index] = path
    (count,) = counts
    missing = [label(k, count) for k in range(first, first + count) if k not in given]
    if missing:
        raise error(f"{', '.join(missing)} missing: give the run files of all {count} {noun}")


def check_config(runs: Runs, names: Sequence[str], what: str, error: type[Exception]) -> None:
    """The runs (``what``: "shards", "folds") share the configuration ``names`` (its entries
    as the run file writes them) and the commit; else ``error`` naming the first difference
    and both files."""
    (path0, run0), rest = runs[0], runs[1:]
    first = run0.config.to_json() if run0.config else {}
    for path, run in rest:
        config = run.config.to_json() if run.config else {}
        for name in names:
            if config.get(name) != first.get(name):
                raise error(
                    f"the {what} were run with other options: {name} is "
                    f"{first.get(name)!r} in {path0} but {config.get(name)!r} in {path}"
                )
        if run.commit != run0.commit:
            raise error(
                f"the {what} ran other code: commit {run0.commit} in {path0}, "
                f"{run.commit} in {path}"
            )


def check_code(runs: Runs, what: str, error: type[Exception]) -> None:
    """The same code in every run (``what``: the shards of a run, the folds of a design), by
    the code versions each result was keyed by (the evaluation's, each suite's, each
    decoder's): one commit with an edit between two of them would otherwise join."""
    seen: dict[tuple[str, str], tuple[str, Path]] = {}
    for path, run in runs:
        for result in run.results:
            inputs = result.results_inputs()
            parts = (("evaluation", ""), ("suite", result.suite), ("decoder", result.decoder))
            for part, name in parts:
                value = inputs.get(part)
                if value is None:
                    continue
                first = seen.setdefault((part, name), (str(value), path))
                if first[0] != str(value):
                    component = f"{part} {name}".strip()
                    raise error(
                        f"the {what} ran other code: the {component} code is {first[0]} in "
                        f"{first[1]} but {value} in {path}"
                    )


def check_like_for_like(
    runs: Runs,
    relevant: Callable[[CaseResult, CaseResult], Collection[str]],
    refused: str,
    error: type[Exception],
) -> None:
    """Every two results of different runs differ in no kind of ``case_differences`` that
    ``relevant(one, other)`` names (a difference a side cannot verify passes); else ``error``,
    "A and B are not {refused}: what differs (which tests)"."""
    seen: list[tuple[Path, CaseResult]] = []
    for path, run in runs:
        for result in run.results:
            for other_path, other in seen:
                if other_path == path:
                    continue
                kinds = relevant(other, result)
                for difference in case_differences(other, result):
                    if difference.kind in kinds and not difference.unverified:
                        raise error(
                            f"{path} and {other_path} are not {refused}: "
                            f"{difference.text} ({key_text(other.key)} against "
                            f"{key_text(result.key)})"
                        )
            seen.append((path, result))


def joined_outcomes(runs: Runs, *, every: bool) -> RunOutcomes:
    """The runs' outcomes together, as one run's. Shards (``every`` false) each ran their own
    tests: the selected are summed, each outcome's tests joined. Folds (``every`` true) each
    ran every test: the selected are one fold's, and a test passed where it passed in every
    fold (another outcome in any fold is that outcome)."""
    each = [(path, run.outcomes or RunOutcomes()) for path, run in runs]
    selected = [outcomes.selected for _, outcomes in each]
    joined: dict[str, Any] = {}  # each outcome's tests
    for name in OUTCOMES:
        found = [t for _, outcomes in each for t in outcomes.of(name)]
        joined[name] = tuple(sorted(set(found) if every else found))
    without = [t for _, outcomes in each for t in outcomes.without_result]
    out = RunOutcomes(
        selected=max(selected, default=0) if every else sum(selected),
        **joined,
        without_result=tuple(sorted(set(without)) if every else without),
        interrupted=next((o.interrupted for _, o in each if o.interrupted), None),
        incomplete=tuple(f"{path}: {reason}" for path, o in each for reason in o.incomplete),
    )
    if not every:
        return out
    other = {t for name in OUTCOMES if name != "passed" for t in out.of(name)}
    return replace(out, passed=tuple(t for t in out.passed if t not in other))
