"""The host time one call of a small op takes from Python, by path: the
Rust launch alone (a loop inside the extension), the
extension alone (arrays described once, output given), the NumPy-style
wrapper ``rustile.softmax`` (which describes its arrays, allocates the
output from PyTorch and finds the current stream), the custom op
``torch.ops.rustile.softmax``, and ``torch.softmax`` for scale. Issue 37's
target: the wrapper adds at most 10 µs to the launch.

    python3 bench/python_call.py   # on a GPU machine with torch and the package installed
"""

import time

import torch

import rustile
import rustile.torch  # noqa: F401  (registers torch.ops.rustile.*)
from rustile import _rustile
from rustile._arrays import desc, stream_of


def per_call_us(f, n=2000, loops=5):
    """The best of ``loops`` loops of ``n`` calls, µs a call (host time; the GPU is waited for between loops)."""
    for _ in range(100):
        f()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(loops):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        best = min(best, (time.perf_counter() - t0) / n)
        torch.cuda.synchronize()
    return best * 1e6


def main():
    x = torch.randn(8, 256, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    xd, yd, s = desc(x), desc(y), stream_of(x)
    rows = [
        ("the extension alone", per_call_us(lambda: _rustile.softmax(xd, yd, s))),
        ("the Rust launch alone (a loop in Rust)", _rustile.softmax_launch_us(xd, yd, s, 2000)),
        ("rustile.softmax(x)", per_call_us(lambda: rustile.softmax(x))),
        ("torch.ops.rustile.softmax(x)", per_call_us(lambda: torch.ops.rustile.softmax(x))),
        ("torch.softmax(x, -1)", per_call_us(lambda: torch.softmax(x, -1))),
        # The wrapper's parts, alone.
        ("  describe x (desc)", per_call_us(lambda: desc(x))),
        ("  the current stream", per_call_us(lambda: stream_of(x))),
        ("  x.new_empty(shape)", per_call_us(lambda: x.new_empty(xd[1]))),
        ("  torch.empty(shape, device=)", per_call_us(lambda: torch.empty(xd[1], dtype=x.dtype, device=x.device))),
    ]
    print(f"softmax of 8x256 bf16 on {torch.cuda.get_device_name()}: host µs a call")
    for name, us in rows:
        print(f"  {name:32s} {us:7.1f}")
    print(f"  the Python call adds {rows[2][1] - rows[1][1]:.1f} µs to the Rust launch (target ≤ 10); the wrapper alone {rows[2][1] - rows[0][1]:.1f}")


if __name__ == "__main__":
    main()
