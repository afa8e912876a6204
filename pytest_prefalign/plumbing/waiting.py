"""How torch's OpenMP threads wait between two parallel regions, chosen once, before torch starts.

torch's Linux wheels run their CPU kernels on libgomp. A thread that has finished its share of
a parallel region (a matmul, a norm, an add) waits for the next one: it spins for
``GOMP_SPINCOUNT`` iterations, then sleeps until it is woken. A model's pass is hundreds of
such regions separated by the few microseconds of Python between two ops, so the way threads
wait is felt on every decoding step:

- **sleeping at once** (``OMP_WAIT_POLICY=PASSIVE``, no spin) costs a wake-up per region. On an
  idle 2-core machine, greedy decoding of 16 prompts and sampling 16 of each of 4 took 4.7 s
  and 9.8-10.2 s so, against 3.9-4.0 s and 7.6-8.8 s spinning 20,000 iterations first (best
  of 4 each, alternating); a short spin (1,000 or 3,000) gained nothing;
- **spinning** wastes the core where another process needs it: with the same work running
  beside it on both cores (at the same priority), the spinning run took 10.4-11.8 s and
  19-22 s, against 7.7-9.3 s and 13-17 s sleeping.

So a prefalign run spins (``GOMP_SPINCOUNT=20000``) where the cores it may use were idle when it
started (other processes busy on less than ``IDLE_BELOW`` of a core over ``SAMPLE_S``, read
from ``/proc/stat``), and sleeps at once (``OMP_WAIT_POLICY=PASSIVE``) where they were busy or
that cannot be read. The user's own ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` comes first, and
``PREFALIGN_WAIT=spin`` or ``passive`` sets either. The numbers do not change, only the time.
xdist's workers inherit the controller's choice. No torch here: it must be decided before torch
loads libgomp, which reads the environment once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

import pytest

SPIN_COUNT = "20000"  # GOMP_SPINCOUNT where the run spins (measured above)
IDLE_BELOW = 0.25  # other processes' busy cores below which the machine counts as idle
SAMPLE_S = 0.2  # how long the cores are watched at the start
CHOICE_ENV = "PREFALIGN_WAIT"  # "spin" or "passive": the choice made by hand
PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class Waiting:
    """The choice: ``how`` is ``spin``, ``passive`` or ``user`` (the environment already said),
    ``why`` says what decided it, as the run's header prints it."""

    how: str
    why: str

    def header(self) -> str:
        if self.how == "spin":
            what = f"OpenMP threads spin between ops (GOMP_SPINCOUNT={SPIN_COUNT})"
        elif self.how == "passive":
            what = "OpenMP threads sleep between ops (OMP_WAIT_POLICY=PASSIVE)"
        else:
            what = "OpenMP threads wait as the environment says"
        return f"prefalign: {what}: {self.why}"


# the run's choice, for its header (the controller's; a worker inherits it as the environment)
KEY: pytest.StashKey[Waiting] = pytest.StashKey()


def choose(environ: MutableMapping[str, str] = os.environ) -> Waiting:
    """Decide how the OpenMP threads wait and set it in ``environ`` (module docstring)."""
    if "OMP_WAIT_POLICY" in environ or "GOMP_SPINCOUNT" in environ:
        given = {k: environ[k] for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in environ}
        return Waiting("user", ", ".join(f"{k}={v}" for k, v in given.items()) + " set")
    forced = environ.get(CHOICE_ENV, "").strip().lower()
    if forced and forced not in ("spin", "passive"):
        raise ValueError(f"{CHOICE_ENV}={forced!r}: expected spin or passive")
    if forced:
        return _set(environ, forced, f"{CHOICE_ENV}={forced}")
    busy = busy_cores(_cores(), SAMPLE_S)
    if busy is None:
        return _set(environ, "passive", "how busy the cores are could not be read")
    if busy < IDLE_BELOW:
        return _set(environ, "spin", f"its cores were idle at the start ({busy:.2f} busy)")
    return _set(environ, "passive", f"{busy:.1f} of its cores were busy at the start")


def _set(environ: MutableMapping[str, str], how: str, why: str) -> Waiting:
    if how == "spin":
        environ["GOMP_SPINCOUNT"] = SPIN_COUNT
    else:
        environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return Waiting(how, why)


def _cores() -> set[int] | None:
    """The CPUs this process may run on (None: all of them)."""
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def busy_cores(cores: set[int] | None, seconds: float, stat: Path = PROC_STAT) -> float | None:
    """How many of ``cores`` (None: all) were busy over ``seconds``: the share of their time
    ``/proc/stat`` counts as neither idle nor waiting for I/O, summed over them. None where
    ``/proc/stat`` cannot be read."""
    before = cpu_times(stat)
    if before is None:
        return None
    time.sleep(seconds)
    after = cpu_times(stat)
    if after is None:
        return None
    return busy_between(before, after, cores)


def cpu_times(stat: Path = PROC_STAT) -> dict[int, tuple[int, int]] | None:
    """Per CPU, ``(all ticks, idle and iowait ticks)`` from ``/proc/stat``'s ``cpuN`` lines."""
    try:
        text = stat.read_text()
    except OSError:
        return None
    times = {}
    for line in text.splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu":
            continue
        try:
            ticks = [int(f) for f in fields[:8]]  # user .. steal; guest time is within user
            times[int(name[3:])] = (sum(ticks), ticks[3] + ticks[4])
        except (ValueError, IndexError):
            return None
    return times or None


def busy_between(
    before: Mapping[int, tuple[int, int]],
    after: Mapping[int, tuple[int, int]],
    cores: set[int] | None,
) -> float:
    """The busy cores between two ``cpu_times`` readings, over ``cores`` (None: all)."""
    busy = 0.0
    for cpu in after.keys() & before.keys():
        if cores is not None and cpu not in cores:
            continue
        total = after[cpu][0] - before[cpu][0]
        idle = after[cpu][1] - before[cpu][1]
        if total > 0:
            busy += (total - idle) / total
    return busy
