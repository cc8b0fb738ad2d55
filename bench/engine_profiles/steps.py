"""What every step of a run shares: the deadline, the record of each step, and small facts about the checkout."""

from __future__ import annotations

import contextlib
import datetime as dt
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def git_commit(root: Path = ROOT) -> str | None:
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "bench", "operator", ":!bench/results"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if head.returncode == 0 else None


class Budget:
    """The run's deadline: each step gets min(its own limit, what is left)."""

    def __init__(self, total_s: float) -> None:
        self.deadline = time.monotonic() + total_s

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def take(self, limit: float) -> float:
        return max(0.0, min(limit, self.left()))


@dataclass
class StepLog:
    """What happened to each step: ok / skipped / failed, why, how long."""

    steps: list[dict[str, Any]] = field(default_factory=list)

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[dict[str, Any]]:
        rec: dict[str, Any] = {"step": name, "status": "ok"}
        t0 = time.monotonic()
        print(f">> {name}", flush=True)
        try:
            yield rec
        except Skip as e:
            rec.update(status="skipped", reason=str(e))
        except Exception as e:  # one step failing must not lose the others' results
            rec.update(status="failed", reason=f"{type(e).__name__}: {e}"[-3000:])
        finally:
            rec["seconds"] = round(time.monotonic() - t0, 1)
            self.steps.append(rec)
            if rec["status"] != "ok":
                print(f"   {rec['status']}: {rec.get('reason', '')[:800]}", flush=True)


class Skip(Exception):
    """A step that cannot run here, with the reason (recorded, not an error)."""
