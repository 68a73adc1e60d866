"""Hooks for the whole test suite."""

from __future__ import annotations

from testenv.processes import sigterm_as_keyboard_interrupt


def pytest_configure() -> None:
    """SIGTERM stops the run as Ctrl-C does, so the control plane and Prometheus fixtures are
    torn down (their servers die with pytest in any case: testenv.processes)."""
    sigterm_as_keyboard_interrupt()
