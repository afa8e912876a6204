"""The C allocator of a prefalign run: freed buffers kept for the next pass.

glibc's ``malloc`` serves a request above its mmap threshold (128 KiB, rising to at most
32 MiB) with a fresh ``mmap`` and gives it back on ``free``; every pass of a model on the CPU
allocates activations, logits and key/value buffers far larger than that, so each one is paged
in again, page by page (a cold Pref-LaMP run of 4 users, three methods: 4.9 million minor page
faults, 124-128 s). With ``M_MMAP_MAX`` 0 and a high ``M_TRIM_THRESHOLD`` the allocator serves
them from its heap and keeps what is freed for the next request: 1.0 million faults, 117-118 s,
a peak resident memory 4-7% higher (benchmarks/README.md, "Freed buffers kept for the next
pass"). The same settings as the environment variables ``MALLOC_MMAP_MAX_=0`` and
``MALLOC_TRIM_THRESHOLD_``, made from inside the process, where a plugin can make them.

Left alone where the user set any ``MALLOC_*`` variable (their choice), where
``PREFALIGN_MALLOC=system``, or where the C library is not glibc (musl, macOS, Windows).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_MAX = -4
TRIM_THRESHOLD = 2**31 - 1  # give back heap only when this much (2 GiB) is free at its top


def keep_freed_memory() -> bool:
    """Make large allocations come from the heap and keep freed memory for reuse, if this
    process's C library is glibc and nobody chose otherwise; whether it did."""
    if not sys.platform.startswith("linux") or _chosen_elsewhere(os.environ):
        return False
    mallopt = _glibc_mallopt()
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def _chosen_elsewhere(environ: os._Environ[str] | dict[str, str]) -> bool:
    """The user tuned the allocator (``MALLOC_*``) or asked for the system's default."""
    if environ.get("PREFALIGN_MALLOC", "").strip().lower() == "system":
        return True
    return any(name.startswith("MALLOC_") for name in environ)


def _glibc_mallopt():  # type: ignore[no-untyped-def]
    """glibc's ``mallopt``, or None where the C library is another."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None  # another C library
    mallopt = libc.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt
