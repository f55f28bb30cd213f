"""`infergate operator` ends soon after SIGTERM even when a worker thread is still inside a
blocking call (tests/integration/test_faults.py shows it against the API server).

The real process runs, with kopf's run replaced by a stand-in that does what kopf leaves
behind on a busy operator: a thread of a pool stuck in a call for minutes. Python joins
such threads at exit; the operator must not wait for them."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

_EXIT_WITHIN_SECONDS = 10.0

_STAND_IN = """
import signal, sys, threading, time
from concurrent.futures import ThreadPoolExecutor

import kopf

def run(**options):
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="api-call")
    pool.submit(time.sleep, 600)  # a request the API server has not answered yet
    # asyncio.run (kopf's default without a loop) waits on the default executor's threads.
    print("running", "own-loop" if options.get("loop") else "asyncio.run", flush=True)
    stopped.wait()
    print("kopf stopped", flush=True)

kopf.run = run
from infergate.cli import main
sys.exit(main(["operator", "--metrics-port=0", "--health-port=0"]))
"""


def test_sigterm_ends_the_operator_although_a_thread_is_still_in_a_call(tmp_path: Path) -> None:
    log = tmp_path / "operator.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", _STAND_IN], stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    try:
        assert process.stdout is not None
        started = process.stdout.readline()  # empty if it ended before running
        assert started.startswith("running"), log.read_text()
        process.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        code = process.wait(timeout=_EXIT_WITHIN_SECONDS + 60)
        took = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert code == 0, log.read_text()
    assert started.split()[1] == "own-loop"
    assert took < _EXIT_WITHIN_SECONDS, f"the operator took {took:.1f}s to exit after SIGTERM"
