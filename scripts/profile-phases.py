#!/usr/bin/env python3
"""profile-phases.py: the client CPU of `converge bench pipeline` by phase.

Reads a CPU profile written by `converge bench pipeline --cpuprofile FILE`
(converge's measured phase only) and prints each phase's share and its
microseconds per event: the HTTP call (the worker's side, the transport's
read and write loops, and the in-process fake target's server side), the
three group-commit batches (accept, begin, finish), River's executor,
producer and completer, the garbage collector and the scheduler
(docs/benchmarks.md, "Round 8").

    scripts/profile-phases.py BINARY PROFILE EVENTS

A sample belongs to the first phase, in the order of PHASES, whose pattern
appears in any frame of its stack.
"""
import collections
import re
import subprocess
import sys

PHASES = [
    ("net/http.(*conn).serve", "http: fake target's server side (harness)"),
    ("persistConn).writeLoop", "http: transport write loop"),
    ("persistConn).readLoop", "http: transport read loop"),
    ("target.(*HTTP).Call", "http: worker's call"),
    ("GroupCommit).AttemptBegin", "worker: waiting for its begin"),
    ("RunWorker).Work", "worker: the rest of Work"),
    ("EventAccept", "batch: accept"),
    ("AttemptFinish", "batch: finish"),
    ("AttemptBegin", "batch: begin"),
    ("gcBgMarkWorker", "GC: background mark"),
    ("runtime.bgsweep", "GC: sweep"),
    ("jobcompleter", "River: completer"),
    ("producer", "River: producer (fetch)"),
    ("jobexecutor", "River: executor"),
    ("bench.", "bench harness (sources)"),
    ("runtime.mcall", "scheduler"),
    ("runtime.schedule", "scheduler"),
]


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    binary, profile, events = sys.argv[1], sys.argv[2], int(sys.argv[3])
    traces = subprocess.run(["go", "tool", "pprof", "-traces", binary, profile],
                            check=True, capture_output=True, text=True).stdout
    by_phase, total = collections.Counter(), 0.0
    for block in traces.split("-----------+-------------------------------------------------------"):
        lines = [line.strip() for line in block.strip().splitlines() if line.strip()]
        m = lines and re.match(r"([\d.]+)(ms|s)\s+(.*)", lines[0])
        if not m:
            continue
        ms = float(m.group(1)) * (1000 if m.group(2) == "s" else 1)
        frames = [m.group(3)] + lines[1:]
        total += ms
        phase = next((name for pattern, name in PHASES if any(pattern in f for f in frames)), "other")
        by_phase[phase] += ms
    print(f"{'phase':<45} {'share':>6} {'µs/event':>9}")
    for phase, ms in by_phase.most_common():
        print(f"{phase:<45} {100 * ms / total:5.1f}% {1000 * ms / events:9.1f}")
    print(f"{'all samples':<45} {100.0:5.1f}% {1000 * total / events:9.1f}")


if __name__ == "__main__":
    main()
