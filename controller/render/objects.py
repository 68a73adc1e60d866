"""Pieces every rendered object shares: our labels and quantity formatting."""

from __future__ import annotations

from typing import Any

from controller import names

KubeObject = dict[str, Any]


def metadata(
    name: str,
    *,
    policy: str,
    namespace: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Metadata carrying the labels the reconciler prunes by and users filter on."""
    out: dict[str, Any] = {"name": name}
    if namespace is not None:
        out["namespace"] = namespace
    out["labels"] = {
        names.LABEL_MANAGED_BY: names.MANAGED_BY_VALUE,
        names.LABEL_POLICY: policy,
        **(labels or {}),
    }
    return out


def weight(value: float) -> int | str:
    """A fair-sharing weight as a Kubernetes quantity: 2 stays 2, 0.5 becomes "0.5"."""
    return int(value) if float(value).is_integer() else repr(float(value))


def gibibytes(value: int) -> str:
    return f"{value}Gi"
