"""The memory a process may use: the run's total (``--prefalign-memory``, else the memory the
machine has available) shared among the xdist workers, the byte budgets of the runtime's stores
and the size of each model's passes sized as shares of it, and what a run's models and stores
are likely to hold, so that a run can be warned before it starts when they would not fit. No
torch: the plugin reads it before any model loads.

A fixed budget (the prefill store kept 4 GiB per model and process) let a 40-user Pref-LaMP run
reach 10.3 GB resident alone, and two xdist workers twice that, whatever the machine had; a
share of the memory available, divided by the workers, keeps a run within the machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_prefalign.runtime.sources import EMBEDDED, ModelSpec
from pytest_prefalign.runtime.window import (
    CPU_COMPUTED,
    DEFAULT_BOUNDS,
    LOGIT_POSITIONS,
    PASS_TOKENS,
    Bounds,
)

# the run's total in GB, which ``--prefalign-memory`` (ini ``prefalign_memory``) sets for the
# run's processes; unset: the memory the machine has available
TOTAL_ENV = "PREFALIGN_MEMORY_GB"
PREFILL_ENV = "PREFALIGN_PREFILL_MB"  # each prefill store's budget in MiB, set by hand
WORKERS_ENV = "PYTEST_XDIST_WORKER_COUNT"  # set by pytest-xdist in each worker
MEMINFO = Path("/proc/meminfo")
GB = 10**9
# each model's prefill store: an eighth of its process's share, so that the three models a
# process may load (the evaluated one, the pairs' writer, the reference generator) keep at most
# three eighths in prefills, the rest left to the weights, the passes and the other stores
PREFILL_SHARE = 1 / 8
PREFILL_MOST = 4096 * 2**20  # and never more than the fixed budget it replaces
# the predicting hidden states (``hidden.py``): 1/64 of the share, at most its former 256 MiB
HIDDEN_SHARE = 1 / 64
HIDDEN_MOST = 256 * 2**20
# one pass of a model (its activations and the cache it keeps, ``window.Bounds.positions``):
# a quarter of the share; the logits of a teacher-forced pass and their log-probabilities
# (``Bounds.logits``): an eighth. Measured on SmolLM2-135M in float32 (this project's CPU
# machine): a pass that keeps its cache held 108 KB per position at its peak, 39 KB without
# the cache; ``Shape.position_bytes`` estimates 107 KB and 38 KB from the config.
PASS_SHARE = 1 / 4
LOGIT_SHARE = 1 / 8
# the packed copies of a float32 model's linear weights on the CPU (``runtime/packed.py``): made
# only when the model's weights are at most this share of the process's memory, so that the
# copies of the three models a process may load take at most 3/16 of it (SmolLM2-135M's 0.54 GB
# is packed from a share of 8.6 GB: one process, or two workers, on this project's 24 GB machine)
PACK_SHARE = 1 / 16
# ``0`` packs no model (``runtime/packed.py``): every linear runs dense, and no copy is counted
PACKED_ENV = "PREFALIGN_PACKED"
# a process before any model: Python, pytest, torch and transformers imported (0.23 GiB
# resident measured on this project's CPU machine), rounded up for the passes' activations
PROCESS_BYTES = 2**30


def available_bytes() -> int | None:
    """The memory the machine has available now (``MemAvailable`` of ``/proc/meminfo``, else
    the free pages ``os.sysconf`` counts), or None where neither can be read."""
    return _meminfo_bytes("MemAvailable", "SC_AVPHYS_PAGES")


def machine_bytes() -> int | None:
    """The machine's memory (``MemTotal`` of ``/proc/meminfo``, else the pages ``os.sysconf``
    counts): a figure that does not move with what else is resident, or None."""
    return _meminfo_bytes("MemTotal", "SC_PHYS_PAGES")


def _meminfo_bytes(field: str, pages: str) -> int | None:
    """``field`` of ``/proc/meminfo`` in bytes, else ``os.sysconf(pages)`` pages, else None."""
    try:
        for line in MEMINFO.read_text().splitlines():
            name, _, value = line.partition(":")
            if name == field:
                return int(value.split()[0]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf(pages)) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def pack_share(count: int | None = None) -> int | None:
    """The share of one process that decides whether a model's linears are packed
    (``packed_bytes``, ``runtime/packed.py``): ``PREFALIGN_MEMORY_GB`` where set, else the
    machine's memory, over ``count`` processes (``workers()`` when not given). Not the memory
    available now, which moves with what else is resident: the kernel is part of every cached
    value's key, so the same run on the same machine must decide the same way each time."""
    raw = os.environ.get(TOTAL_ENV, "").strip()
    total = run_total() if raw else machine_bytes()
    if total is None:
        return None
    return total // (count if count is not None else workers())


def workers() -> int:
    """The processes sharing the run's memory: pytest-xdist's worker count in a worker, else
    one."""
    raw = os.environ.get(WORKERS_ENV, "")
    try:
        return max(1, int(raw))
    except ValueError:
        return 1


def parse_gb(text: str) -> float:
    """A memory total in GB (``--prefalign-memory``, ``PREFALIGN_MEMORY_GB``): a positive
    number; anything else is a ``ValueError`` saying what is expected."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r}: expected a number of GB, e.g. 16") from None
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{text!r}: expected a number of GB above 0")
    return value


def run_total() -> int | None:
    """The bytes the whole run may use: ``PREFALIGN_MEMORY_GB`` where set, else the memory
    available; None where neither is known."""
    raw = os.environ.get(TOTAL_ENV, "").strip()
    if raw:
        try:
            return int(parse_gb(raw) * GB)
        except ValueError as exc:
            raise ValueError(f"{TOTAL_ENV}={exc}") from None
    return available_bytes()


def process_share(count: int | None = None) -> int | None:
    """The bytes one process of the run may use: the run's total over its ``count`` processes
    (the xdist workers, ``workers()`` when not given)."""
    total = run_total()
    if total is None:
        return None
    return total // (count if count is not None else workers())


def prefill_budget(share: int | None = None) -> int:
    """Each model's prefill store budget in bytes: ``PREFALIGN_PREFILL_MB`` where set (0 keeps
    nothing), else ``PREFILL_SHARE`` of a process's ``share`` (``process_share()`` when not
    given), at most ``PREFILL_MOST``, and ``PREFILL_MOST`` where the memory is not known."""
    raw = os.environ.get(PREFILL_ENV, "").strip()
    if raw:
        try:
            return max(0, int(float(raw) * 2**20))
        except ValueError:
            raise ValueError(f"{PREFILL_ENV}={raw!r}: expected a number of MiB") from None
    share = process_share() if share is None else share
    return PREFILL_MOST if share is None else min(PREFILL_MOST, int(share * PREFILL_SHARE))


def hidden_budget(share: int | None = None) -> int:
    """The budget of a process's predicting hidden states in bytes (``hidden.py``):
    ``HIDDEN_SHARE`` of its ``share`` (``process_share()`` when not given), at most
    ``HIDDEN_MOST``."""
    share = process_share() if share is None else share
    return HIDDEN_MOST if share is None else min(HIDDEN_MOST, int(share * HIDDEN_SHARE))


@dataclass(frozen=True)
class Shape:
    """What one token position of a model holds during a pass, from its config: ``width``
    bytes a value (the weights' dtype)."""

    hidden: int
    intermediate: int
    layers: int
    kv_width: int  # key (or value) values per position and layer: kv heads x head size
    vocab: int
    width: int

    @classmethod
    def of(cls, config: Any, width: int) -> Shape:
        """The shape of a model's (text) config, read as transformers names its fields."""
        if hasattr(config, "get_text_config"):
            config = config.get_text_config(decoder=True)
        hidden = int(config.hidden_size)
        heads = int(config.num_attention_heads)
        kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
        intermediate = int(getattr(config, "intermediate_size", None) or 4 * hidden)
        vocab = int(getattr(config, "vocab_size", 0) or 0)
        return cls(
            hidden, intermediate, int(config.num_hidden_layers), kv_heads * head_dim, vocab, width
        )

    @property
    def kv_bytes(self) -> int:
        """One position's keys and values over all layers."""
        return self.layers * 2 * self.kv_width * self.width

    @property
    def position_bytes(self) -> int:
        """One position of a pass at its peak: a layer's activations (the residual stream,
        the attention's inputs and outputs, the MLP's hidden units) and the cache the pass
        keeps, with a copy of it while it grows."""
        activations = (6 * self.hidden + 4 * self.intermediate) * self.width
        return activations + self.kv_bytes * 3 // 2

    @property
    def logit_bytes(self) -> int:
        """One response position's next-token logits and log-probabilities (float32)."""
        return 2 * self.vocab * 4


def pass_bounds(config: Any, width: int, device_type: str, share: int | None = None) -> Bounds:
    """How much one pass of a model may run (``window.Bounds``). On the CPU: the positions
    whose activations and cache fill ``PASS_SHARE`` of a process's ``share`` and the logit
    positions that fill ``LOGIT_SHARE`` of it (``process_share()`` when not given), at most
    ``window.PASS_TOKENS`` and ``window.LOGIT_POSITIONS`` (those where the memory or the
    config's shape is not known), and at most ``window.CPU_COMPUTED`` positions run at once.
    On another device the fixed bounds: a GPU's memory is its own, and ``devices.halving``
    halves a batch that does not fit."""
    if device_type != "cpu":
        return DEFAULT_BOUNDS
    share = process_share() if share is None else share
    positions, logits = PASS_TOKENS, LOGIT_POSITIONS
    try:
        shape: Shape | None = Shape.of(config, width)
    except (AttributeError, TypeError, ValueError, ZeroDivisionError):
        shape = None  # a config that does not name its shape as transformers does
    if share is not None and shape is not None:
        positions = min(positions, int(share * PASS_SHARE) // max(1, shape.position_bytes))
        logits = min(logits, int(share * LOGIT_SHARE) // max(1, shape.logit_bytes))
    positions, logits = max(1, positions), max(1, logits)
    return Bounds(positions=positions, logits=logits, computed=min(positions, CPU_COMPUTED))


def weights_bytes(spec: ModelSpec) -> int | None:
    """What a model's weights hold once loaded: its parameters at the dtype it loads in (four
    bytes each, two in ``bfloat16`` or ``float16``), read from the embedded model's count or a
    folder's weight files; None for a hub model not on disk, whose size is not known before it
    loads."""
    width = 2 if spec.dtype in ("bfloat16", "float16") else 4
    if spec.kind == "tiny":
        return 0
    if spec.kind == "embedded":
        embedded = EMBEDDED.get(spec.source.removeprefix("embedded:"))
        return embedded.parameters * width if embedded is not None else None
    if spec.kind == "folder":
        folder = Path(spec.source).expanduser()
        files = [*folder.glob("*.safetensors"), *folder.glob("*.bin"), *folder.glob("*.gguf")]
        # stored in 16 bits or fewer, loaded in 32 on the CPU: the files' bytes are a floor
        return sum(f.stat().st_size for f in files) or None
    return None


def packed_bytes(spec: ModelSpec, share: int | None = None) -> int:
    """At most what the packed copies of a model's linear weights hold (``runtime/packed.py``):
    its weights' bytes, where it loads in float32, ``PREFALIGN_PACKED`` is not ``0`` and they
    are at most ``PACK_SHARE`` of a process's ``share`` (``pack_share``; no limit where the
    share is not known), else 0. (The linear weights are all of them but the embedding, which
    a tied output head packs again.) Models placed on a GPU pack nothing, which this, read
    before any model loads, does not know; a folder's weights stored in 16 bits count at
    their files' size, half what they load as."""
    if spec.dtype not in (None, "float32") or os.environ.get(PACKED_ENV, "").strip() == "0":
        return 0
    weights = weights_bytes(spec)
    if not weights or (share is not None and weights > share * PACK_SHARE):
        return 0
    return weights


@dataclass(frozen=True)
class Need:
    """What a run is likely to hold at its peak: per process, the process itself, the weights
    of the models it loads, a full prefill store for each and one pass at its bound; and the
    run's total to hold it in."""

    processes: int
    weights: int  # bytes, per process
    packed: int  # bytes, per process: the packed copies of float32 linear weights
    stores: int  # bytes, per process
    passes: int  # bytes, per process: one pass at a time, its logits after its body
    total: int | None  # the run's total, or None where unknown
    unknown: tuple[str, ...]  # the models whose weights are not known before loading

    @property
    def per_process(self) -> int:
        return PROCESS_BYTES + self.weights + self.packed + self.stores + self.passes

    @property
    def bytes(self) -> int:
        return self.processes * self.per_process


def need(models: list[ModelSpec], processes: int) -> Need:
    """What ``processes`` processes loading ``models`` (each of them, as every worker of a
    run may) are likely to hold, with the run's total, under the sizing rule of this module."""
    sources = {spec.source: spec for spec in models}  # a model loads once per process
    sizes = {source: weights_bytes(spec) for source, spec in sources.items()}
    known = sum(size for size in sizes.values() if size is not None)
    unknown = tuple(sorted(source for source, size in sizes.items() if size is None))
    total = run_total()
    share = None if total is None else total // processes
    packing = pack_share(processes)  # the machine's memory, read once for every model
    copies = sum(packed_bytes(spec, packing) for spec in sources.values())
    stores = len(sources) * prefill_budget(share) + hidden_budget(share)
    passes = 0 if share is None else int(share * max(PASS_SHARE, LOGIT_SHARE))
    return Need(processes, known, copies, stores, passes, total, unknown)


def shortfall(models: list[ModelSpec], processes: int) -> str | None:
    """A warning when the run is likely to exceed its memory: its models' weights, their
    prefill stores and the processes themselves over the run's total, or the total set above
    what the machine has available; None when it fits or nothing is known."""
    needed = need(models, processes)
    available = available_bytes()
    lines = []
    if needed.total is not None and needed.bytes > needed.total:
        lines.append(
            f"{processes} process(es) of about {needed.per_process / GB:.1f} GB each (the "
            f"models' weights {needed.weights / GB:.1f} GB, their packed copies "
            f"{needed.packed / GB:.1f} GB, their stores "
            f"{needed.stores / GB:.1f} GB, a pass {needed.passes / GB:.1f} GB, the process "
            f"{PROCESS_BYTES / GB:.1f} GB) need about "
            f"{needed.bytes / GB:.1f} GB, more than the run's {needed.total / GB:.1f} GB"
        )
    if os.environ.get(TOTAL_ENV) and available is not None and needed.total is not None:
        if needed.total > available:
            lines.append(
                f"--prefalign-memory sets {needed.total / GB:.1f} GB, more than the "
                f"{available / GB:.1f} GB this machine has available"
            )
    if not lines:
        return None
    hint = "run fewer workers (-n) or smaller models"
    if needed.unknown:  # a hub model not yet downloaded: the need is more than said
        hint += f"; not counted: {', '.join(needed.unknown)}, whose size is known once loaded"
    return f"prefalign: the run is likely to exceed its memory: {'; '.join(lines)} ({hint})"
