"""The broker's allocator policy (broker/allocator.py), in a fresh interpreter each: freed 4 MiB buffers are
reused by the next ones instead of faulting in new pages."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = """
import ctypes, resource, sys
from ads_spark.broker.allocator import keep_freed_memory
try:
    libc = ctypes.CDLL("libc.so.6")
except OSError:
    sys.exit(3)
if sys.argv[1] == "policy" and not keep_freed_memory():
    sys.exit(3)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.malloc.argtypes = [ctypes.c_size_t]
size = 4 << 20
def cycle():  # three request-sized buffers alive at once, as with a few messages in flight
    buffers = [libc.malloc(size) for _ in range(3)]
    for buffer in buffers:
        ctypes.memset(buffer, 1, size)
    for buffer in buffers:
        libc.free(buffer)
cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    cycle()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults_per_buffer(mode: str) -> float:
    done = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, timeout=60)
    if done.returncode == 3:
        pytest.skip("the C library here is not glibc, or refused the policy")
    assert done.returncode == 0, done.stderr
    return int(done.stdout) / 30


def test_a_freed_request_sized_buffer_is_reused_without_new_page_faults():
    pages = (4 << 20) // 4096
    assert faults_per_buffer("default") > pages / 2  # glibc's default: the freed memory went back to the OS
    assert faults_per_buffer("policy") < 8
