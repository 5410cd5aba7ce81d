"""Small stage functions for the stage-runner tests (importable by a child process without torch)."""

from __future__ import annotations

import time


def slow(params, deps, outs, run):
    outs["first"].write_text("partial")          # in the run's staging folder until the stage returns
    time.sleep(120)
    return {}


def quick(params, deps, outs, run):
    outs["first"].write_text("done")
    return {"ok": True}
