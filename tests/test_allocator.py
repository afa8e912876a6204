"""The C allocator a prefalign run sets up (``plumbing/allocator.py``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from pytest_prefalign.plumbing import allocator


@pytest.mark.parametrize(
    ("environ", "chosen"),
    [
        ({}, False),
        ({"PATH": "/bin", "OMP_WAIT_POLICY": "PASSIVE"}, False),
        ({"MALLOC_ARENA_MAX": "2"}, True),  # the user tuned glibc's allocator: left alone
        ({"MALLOC_MMAP_MAX_": "65536"}, True),
        ({"PREFALIGN_MALLOC": "system"}, True),
        ({"PREFALIGN_MALLOC": " System "}, True),
        ({"PREFALIGN_MALLOC": "keep"}, False),
    ],
)
def test_the_users_choice_comes_first(environ: dict[str, str], chosen: bool) -> None:
    assert allocator._chosen_elsewhere(environ) is chosen


def test_a_users_choice_is_not_overridden(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFALIGN_MALLOC", "system")
    assert allocator.keep_freed_memory() is False


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or allocator._glibc_mallopt() is None,
    reason="glibc's mallopt only",
)
def test_freed_buffers_are_reused_instead_of_paged_in_again() -> None:
    # 40 buffers of 64 MiB, each written and freed in turn: served by mmap, every one is paged
    # in afresh (16k minor faults each with 4 KiB pages); from the heap, the first one's pages
    # serve the rest (relative, so that huge pages or other page sizes do not matter)
    script = textwrap.dedent(
        """
        import ctypes, resource, sys
        from pytest_prefalign.plumbing import allocator
        if sys.argv[1] == "keep":
            assert allocator.keep_freed_memory()
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc.restype = ctypes.c_void_p
        libc.free.argtypes = (ctypes.c_void_p,)
        size = 64 << 20
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(40):
            p = libc.malloc(size)
            ctypes.memset(p, 1, size)
            libc.free(p)
        print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        """
    )

    def faults(mode: str) -> int:
        env = {"PATH": "/usr/bin:/bin"}  # no MALLOC_* of the caller's
        done = subprocess.run(
            [sys.executable, "-c", script, mode], env=env, capture_output=True, text=True,
            check=True,
        )  # fmt: skip
        return int(done.stdout.split()[-1])

    system, keep = faults("system"), faults("keep")
    assert keep * 5 < system, (keep, system)
