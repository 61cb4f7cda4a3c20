"""GPU MODE's TriMul from Python (``rustile.trimul.custom_kernel``) at the
task's seven benchmark shapes, timed as the Rust bench times the op (CUDA
events, the L2 flushed before each of 100 repetitions, the median), with
the geometric mean: the figure to set beside ``rustile-bench --ops trimul``
run in the same session. The difference is the Python path's cost.

    python3 bench/trimul_python.py   # on a GPU machine with torch and the package
"""

import math
import statistics

import torch

from rustile.trimul import custom_kernel, random_data

# (n, batch, dim, masked, cauchy): GPU MODE's order; hidden 128.
SHAPES = [(256, 2, 128, False, False), (768, 1, 128, False, True), (256, 2, 384, True, False), (512, 1, 128, False, False),
          (1024, 1, 128, False, True), (768, 1, 384, True, False), (1024, 1, 384, False, False)]


def median_ms(f, reps=100):
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    for _ in range(5):
        f()
    times = []
    for _ in range(reps):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        f()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    print(f"trimul from Python (rustile.trimul.custom_kernel) on {torch.cuda.get_device_name()}")
    times = []
    for shape in SHAPES:
        n, batch, dim, masked, cauchy = shape
        d = random_data(batch, n, dim, masked=masked, cauchy=cauchy)
        ms = median_ms(lambda: custom_kernel(d))
        times.append(ms)
        print(f"  n {shape[0]:5} batch {shape[1]} dim {shape[2]:4}{' masked' if shape[3] else ''}{' cauchy' if shape[4] else ''}: {ms:.3f} ms")
    print(f"  geometric mean {math.exp(sum(map(math.log, times)) / len(times)):.3f} ms")


if __name__ == "__main__":
    main()
