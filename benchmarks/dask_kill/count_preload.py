# Dask worker preload for benchmarks/dask_kill/measure.sh: the workers' own count of answers.
# counts every answer a worker's oracle returns: one byte per answer in CNT/<pid>
import os
import exactlearn.oracle as _o
if not hasattr(_o.CountingOracle, "_h3_orig"):
    _fd = os.open(os.path.join(os.environ["CNT"], str(os.getpid())), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    _o.CountingOracle._h3_orig = _o.CountingOracle.__call__
    def _call(self, tokens, _fd=_fd):
        y = _o.CountingOracle._h3_orig(self, tokens)
        if self._parent is None:
            os.write(_fd, b"x")
        return y
    _o.CountingOracle.__call__ = _call
