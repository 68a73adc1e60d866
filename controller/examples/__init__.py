"""The bundled example policy, and synthetic policies of any size for tests and benchmarks."""

from __future__ import annotations

from pathlib import Path

EXAMPLE_DIR = Path(__file__).parent
