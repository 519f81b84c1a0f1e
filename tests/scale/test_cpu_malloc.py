"""glibc's mmap threshold on CPU workers (teamrl/scale/cpu_malloc.py,
distributed.cpu_mmap_threshold_kib): which workers fix it, the config's bounds, and that
fixing it really keeps a freed large block from raising the threshold (glibc only)."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest
from helpers.runs import tiny_overrides

from teamrl.config import ConfigError, load_config
from teamrl.scale.cpu_malloc import threshold_kib


@pytest.mark.parametrize(
    "setting, device, sharded, expected",
    [
        (None, "cpu", True, 128),  # the default where fragmentation was measured
        (None, "cpu", False, 0),  # data parallel: glibc's adaptive threshold
        (None, "cuda:0", True, 0),  # GPU memory is not glibc's
        (64, "cpu", False, 64),  # an explicit value on every CPU worker
        (64, "cuda", True, 0),
        (0, "cpu", True, 0),  # 0: glibc's own, sharded or not
    ],
)
def test_which_workers_fix_the_threshold(setting, device, sharded, expected):
    assert threshold_kib(setting, device, sharded) == expected


@pytest.mark.parametrize("bad", [-1, 32 * 1024 + 1])
def test_the_threshold_is_bounded(bad):
    with pytest.raises(ConfigError, match=rf"distributed.cpu_mmap_threshold_kib: {bad}\b"):
        load_config(
            None, [*tiny_overrides("shared", 1), f"distributed.cpu_mmap_threshold_kib={bad}"]
        )
    for ok in (0, 32 * 1024):
        load_config(
            None, [*tiny_overrides("shared", 1), f"distributed.cpu_mmap_threshold_kib={ok}"]
        )


# In a fresh process: free an 8 MiB block (mmapped), then take 1 MiB. glibc's adaptive
# threshold rose to 8 MiB at the free, so the 1 MiB block comes from the heap (no new mmapped
# block); with the threshold fixed at 128 KiB it is mmapped (one more).
PROBE = """
import ctypes, sys
libc = ctypes.CDLL(None)
names = ("arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost").split()
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in names]
libc.mallinfo2.restype = Info
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "fixed":
    from teamrl.scale.cpu_malloc import set_mmap_threshold
    assert set_mmap_threshold(128)
libc.free(libc.malloc(8 << 20))
before = libc.mallinfo2().hblks
block = libc.malloc(1 << 20)
print(libc.mallinfo2().hblks - before)
"""


def _has_mallinfo2() -> bool:
    try:
        return hasattr(ctypes.CDLL(None), "mallinfo2")
    except OSError:
        return False


@pytest.mark.skipif(not _has_mallinfo2(), reason="glibc >= 2.33 only (mallinfo2)")
def test_a_fixed_threshold_keeps_large_blocks_mmapped():
    def new_mmapped_blocks(mode: str) -> int:
        out = subprocess.run(
            [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
        )
        return int(out.stdout)

    assert new_mmapped_blocks("adaptive") == 0
    assert new_mmapped_blocks("fixed") == 1
