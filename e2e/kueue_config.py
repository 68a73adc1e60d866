"""Kueue's configuration with the label keys Quartermaster needs copied from Jobs to Workloads.

Kueue makes the Workload of a Job (JobSet, PyTorchJob, RayJob, ...) and copies to it only the
Job's labels whose keys its configuration lists in `integrations.labelKeysToCopy`; it copies
no annotations, and copies labels only when it creates the Workload. Kueue's release manifests
carry that configuration as the `controller_manager_config.yaml` key of the ConfigMap
`kueue-manager-config` in `kueue-system`, which the controller reads at start-up only.

So e2e/kind.sh reads the installed ConfigMap, passes it through this module, replaces it, and
restarts Kueue's controller. Editing the YAML the release shipped, rather than writing a new
one, keeps its apiVersion (`config.kueue.x-k8s.io/v1beta1` or `v1beta2`: both have
`integrations.labelKeysToCopy`) and every other setting it has.

    kubectl -n kueue-system get configmap kueue-manager-config -o json \
      | python -m e2e.kueue_config [EXTRA_KEY ...] | kubectl replace -f -

Extra keys are the keys of the deadlines' `matchLabels` (say `example.com/paper`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from controller import names

CONFIG_MAP = "kueue-manager-config"
NAMESPACE = "kueue-system"
CONFIG_KEY = "controller_manager_config.yaml"
MAX_KEYS = 64
"""Kueue's bounds on labelKeysToCopy: at most 64 keys of at most 64 characters each."""
MAX_KEY_LENGTH = 64


class ConfigError(ValueError):
    """The ConfigMap is not Kueue's configuration as expected; the message says what is off."""


def with_label_keys(config: str, keys: Sequence[str]) -> str:
    """Kueue's configuration (YAML) with `keys` added to `integrations.labelKeysToCopy`, after
    the keys it lists already, each once; everything else as it was."""
    try:
        parsed = yaml.safe_load(config)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{CONFIG_KEY} is not YAML: {exc}") from exc
    if not isinstance(parsed, dict) or parsed.get("kind") != "Configuration":
        raise ConfigError(f"{CONFIG_KEY} is not a Kueue Configuration (kind: Configuration)")
    if parsed.get("integrations") is None:  # absent, or `integrations:` with nothing under it
        parsed["integrations"] = {}
    integrations = parsed["integrations"]
    if not isinstance(integrations, dict):
        raise ConfigError(f"{CONFIG_KEY}: integrations is not a mapping")
    listed = integrations.get("labelKeysToCopy") or []
    if not isinstance(listed, list):
        raise ConfigError(f"{CONFIG_KEY}: integrations.labelKeysToCopy is not a list")
    merged = [str(k) for k in listed]
    merged.extend(k for k in dict.fromkeys(keys) if k not in merged)
    too_long = [k for k in merged if len(k) > MAX_KEY_LENGTH]
    if too_long or len(merged) > MAX_KEYS:
        raise ConfigError(
            f"integrations.labelKeysToCopy takes at most {MAX_KEYS} keys of at most "
            f"{MAX_KEY_LENGTH} characters: {len(merged)} keys, too long: {too_long}"
        )
    integrations["labelKeysToCopy"] = merged
    return yaml.safe_dump(parsed, sort_keys=False)


def patched_config_map(config_map: Mapping[str, Any], extra_keys: Sequence[str]) -> dict[str, Any]:
    """The ConfigMap (as `kubectl get -o json` prints it) with our label keys and `extra_keys`
    in Kueue's configuration; its resourceVersion kept, so a replace fails on a concurrent edit.
    """
    data = config_map.get("data")
    if not isinstance(data, Mapping) or not isinstance(data.get(CONFIG_KEY), str):
        raise ConfigError(f"ConfigMap {CONFIG_MAP} has no data.{CONFIG_KEY}")
    out = dict(config_map)
    out["data"] = {
        **data,
        CONFIG_KEY: with_label_keys(data[CONFIG_KEY], [*names.LABEL_KEYS_TO_COPY, *extra_keys]),
    }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    extra = list(sys.argv[1:] if argv is None else argv)
    try:
        config_map = json.load(sys.stdin)
        print(json.dumps(patched_config_map(config_map, extra), indent=2))
    except (ConfigError, json.JSONDecodeError) as exc:
        print(f"e2e.kueue_config: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
