"""glibc's mmap threshold on CPU workers (``distributed.cpu_mmap_threshold_kib``).

Why. glibc serves a large allocation with its own ``mmap`` (returned to the system on free)
and a smaller one from its heap, whose freed holes stay resident until something of a size
that fits reuses them. The threshold between the two is adaptive: freeing an mmapped block
raises it to that block's size (up to 32 MiB), so after the first few frees almost every
tensor of a CPU training step comes from the heap. A data-parallel worker reuses the same
sizes step after step and the heap settles. An FSDP worker does not: every decoder layer
all-gathers its weights into fresh buffers, reduce-scatters its gradients from others, and
frees them a layer later, in a pattern the heap fragments under. Measured on 2 gloo workers of
a 62M-parameter model (0.23 GiB of float32 weights), three steps each, resident GiB after each
step:

    sharding=none, adaptive threshold   1.34  1.46  1.40   (peak 1.64)
    sharding=fsdp, adaptive threshold   1.37  1.71  1.93   (peak 2.03, still growing)
    sharding=none, 128 KiB fixed        1.28  1.28  1.28   (peak 1.47)
    sharding=fsdp, 128 KiB fixed        1.06  1.06  1.06   (peak 1.40)

With the threshold fixed the sharded worker holds what the arithmetic says it should: the
replica (4 bytes a parameter) plus half of the 16 bytes of weights, gradients and AdamW
moments, 0.23 GiB below the unsharded one; with the adaptive threshold sharding costs memory
instead. ``mallopt(M_MMAP_THRESHOLD, n)`` fixes the threshold (setting it turns the
adaptation off). The price is a page fault on first touch of every large block, which is why
the default fixes it only where it was measured to matter: the CPU workers of a sharded group.

GPU memory is PyTorch's caching allocator's, not glibc's: this concerns CPU workers only.
"""

from __future__ import annotations

import ctypes

M_MMAP_THRESHOLD = -3  # glibc's <malloc.h>
DEFAULT_SHARDED_KIB = 128  # glibc's own starting value, kept fixed


def threshold_kib(setting: int | None, device: str, sharded: bool) -> int:
    """The threshold a worker sets, in KiB; 0: leave glibc's adaptive one."""
    if not device.startswith("cpu"):
        return 0
    if setting is None:
        return DEFAULT_SHARDED_KIB if sharded else 0
    return setting


def set_mmap_threshold(kib: int) -> bool:
    """Fix glibc's mmap threshold at ``kib`` KiB for this process. False where the C library
    has no ``mallopt`` (not glibc: macOS, Windows) or refuses the value; the worker then runs
    with its allocator's own policy, which only changes how much memory it keeps resident."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, kib * 1024) == 1
