"""The deadline risk's calibration on the `bench-sim` replays, under both deadline rules.

Issue 33's goal, measured on its own: on every replay the calibrated risk's largest deviation
over deciles with at least 100 estimates is at most 0.05, and its Brier score beats the raw
model's. The policy decides its mix on the calibrated risk, so what the table judges is what
was acted on; only the policy's replay is run (the estimates are the policy's), which makes
this a few minutes a replay rather than the hours `make bench-sim` takes with its baselines.

Per trace, seed and deadline rule it prints the raw and the calibrated figures, then per judged
decile of the calibrated risk its estimates, the distinct deadlines behind them and the
deviation with its standard error counted by deadline (a deadline's estimates share one
outcome, so they are one draw, not hundreds): a deviation within two standard errors is as
large as chance alone makes it with that few deadlines.

Usage: bench/bench_calibration.py [NAME ...] [--seeds 0,1,2] [--rules true,declared], NAME from
philly-busiest14d, philly, alibaba (busiest 14 days and Alibaba when none are given; the whole
of Philly takes several minutes a replay).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from controller.sim.calibration import calibrate, calibrate_recalibrated
from controller.sim.engine import POLICY, replay
from controller.sim.run import prepare, traces_dir
from controller.sim.tables import as_list

CASES = {
    "philly-busiest14d": ("philly.csv.gz", "busiest14d"),
    "philly": ("philly.csv.gz", None),
    "alibaba": ("alibaba_openb_2023.csv.gz", None),
}
"""The `bench-sim` cases: name -> (trace, window)."""
DEFAULT_CASES = ("philly-busiest14d", "alibaba")
GOAL = 0.05


def parse_list(text: str) -> list[str]:
    return [w.strip() for w in text.split(",") if w.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", metavar="NAME", help=", ".join(CASES))
    parser.add_argument("--seeds", type=parse_list, default=["0", "1", "2"])
    parser.add_argument("--rules", type=parse_list, default=["true", "declared"])
    args = parser.parse_args(argv)
    names = args.cases or DEFAULT_CASES
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown case {unknown[0]!r}: expected one of {', '.join(CASES)}")
    met = total = 0
    for name in names:
        trace, window = CASES[name]
        for rule in args.rules:
            for seed in (int(s) for s in args.seeds):
                started = time.process_time()
                inputs = prepare(traces_dir() / trace, seed=seed, window=window, deadline_from=rule)
                result = replay(
                    inputs.policy_set,
                    inputs.jobs,
                    POLICY,
                    seed=seed,
                    scored_from=inputs.scored_from,
                )
                log = as_list(result.risk_log)  # read three times: made into records once
                raw = calibrate(log)
                fixed = calibrate_recalibrated(log)
                cpu = time.process_time() - started
                if fixed is None:
                    print(f"{name} deadlines-from {rule} seed {seed}: no calibrated risk")
                    continue
                worst_raw, worst = raw.max_deviation(), fixed.max_deviation()
                ok = (worst is None or worst <= GOAL) and (
                    raw.brier is None or fixed.brier is None or fixed.brier < raw.brier
                )
                met += ok
                total += 1
                print(
                    f"{name} deadlines-from {rule} seed {seed} ({cpu:.0f} s CPU): "
                    f"raw max dev {_f(worst_raw)} Brier {_f(raw.brier, 4)}; calibrated max dev "
                    f"{_f(worst)} Brier {_f(fixed.brier, 4)}: {'met' if ok else 'NOT MET'}"
                )
                for decile in fixed.judged():
                    deviation, stderr = decile.deviation, decile.standard_error
                    assert deviation is not None and stderr is not None and decile.deadlines
                    within = "within" if abs(deviation) <= 2 * stderr else "beyond"
                    print(
                        f"    {decile.label}: {decile.count:,} estimates of {decile.deadlines:,} "
                        f"deadlines, deviation {deviation:+.3f} +/- {stderr:.3f} ({within} 2 "
                        "standard errors)"
                    )
                sys.stdout.flush()
    print(f"calibration goal (max deviation <= {GOAL}, Brier beats raw): met on {met}/{total}")
    return 0


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
