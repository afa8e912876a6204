"""pytest-xdist: workers run tests; only the controller summarises and writes files."""

from __future__ import annotations

import pytest


def is_worker(config: pytest.Config) -> bool:
    """Whether this process is an xdist worker (xdist gives workers a ``workerinput``)."""
    return hasattr(config, "workerinput")
