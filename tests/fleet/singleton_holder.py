"""Run by test_singleton.py as a process of its own: take a singleton job's lock, say so on
stdout, then hold it until killed."""

from __future__ import annotations

import sys
import threading

from sanbox.fleet.singleton import Singleton


def main() -> None:
    url, name = sys.argv[1], sys.argv[2]
    job = Singleton(url, name)
    while not job.held():
        threading.Event().wait(0.05)
    print("held", flush=True)
    sys.stdin.read()  # until killed (or the test closes our stdin)


if __name__ == "__main__":
    main()
