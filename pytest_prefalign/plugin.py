"""pytest-prefalign: the plugin pytest loads on every run (kept light)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("prefalign")
    group.addoption("--prefalign", action="store_true", help="run prefalign suites")
    parser.addini("prefalign_data", "data directory for prefalign suites", default="")
