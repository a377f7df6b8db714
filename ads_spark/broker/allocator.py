"""The broker process's allocator policy: freed buffers stay in the process for the next request.

Every replicated batch passes through gRPC's receive buffers and Flight's copies of up to
``max.request.size`` (4 MiB) each. With glibc's defaults a freed buffer that size is unmapped (above the
mmap threshold) or trimmed off the top of its arena, so the next request's buffer faults in fresh pages:
0.07-0.17 page faults per record per broker at RF=3 batched load, 80% of them in ``recvmsg`` copying into
new gRPC slices. On this VM a fresh page faults in the host too (the balloon reports freed guest memory),
and with the policy below a fresh cluster's brokers moved 9-19% more (docs/perf/replicated-produce-path.md, seventh round).

The policy: at most ``ARENAS_MAX`` malloc arenas, each keeping up to ``TRIM_THRESHOLD_BYTES`` of free
memory at its top, and buffers below ``MMAP_THRESHOLD_BYTES`` served from the arenas. What a broker may
keep beyond what it uses is therefore bounded by ARENAS_MAX x TRIM_THRESHOLD_BYTES (128 MiB). Two arenas
of 64 MiB cut the faults as well but lengthened the latency tail in 5 of 8 alternated pairs (cause not
looked into); eight of 16 MiB left a third of the faults. Applied once, before the broker starts its
threads; a C library without ``mallopt`` (not glibc) keeps its own behaviour.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("ads.broker.allocator")

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

ARENAS_MAX = 4
TRIM_THRESHOLD_BYTES = 32 << 20
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's own ceiling for this setting


def keep_freed_memory() -> bool:
    """Apply the policy above to this process; True when the C library took every setting."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        log.info("no glibc mallopt here: the allocator keeps its defaults")
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    settings = ((_M_ARENA_MAX, ARENAS_MAX), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES),
                (_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    refused = [parameter for parameter, value in settings if mallopt(parameter, value) != 1]  # tries each one
    if refused:
        log.warning("glibc refused mallopt parameters %s: the allocator keeps its defaults for them", refused)
    return not refused
