"""The worker program of ``backend="multiprocessing"``: started by the pool as
``python -m rlpool._worker SETUP`` (this interpreter again, never forked), it
takes the parent's module search path and working directory from SETUP (as
multiprocessing's spawn does, so that the parent's env makers unpickle here),
ignores Ctrl-C (the parent stops its workers in order), and hands control to
the Rust worker loop, exiting with it. Not for direct use."""

import faulthandler
import json
import os
import signal
import sys

if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A crash in an extension (a segfault) prints the Python stacks first.
    faulthandler.enable()
    if len(sys.argv) > 1:
        setup = json.loads(sys.argv[1])
        os.chdir(setup["cwd"])
        sys.path[:] = setup["sys_path"]
    from rlpool import _native

    _native.worker_main()
