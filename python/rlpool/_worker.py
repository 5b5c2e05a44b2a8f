"""The worker program of ``backend="multiprocessing"``: started by the pool as
``python -m rlpool._worker`` (this interpreter again, never forked), it hands
control to the Rust worker loop and exits with it. Not for direct use."""

from rlpool import _native

if __name__ == "__main__":
    _native.worker_main()
