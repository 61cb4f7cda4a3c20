"""PyTorch tensors and NumPy arrays as the extension sees them: a tuple
``(address, shape, strides in elements, dtype, device)``, device the CUDA
ordinal or -1 for host memory. Neither library is imported unless the
caller's array is one of its own.

This runs on every call of every op, so it keeps to what is cheap in
PyTorch: ``dtype`` objects as dict keys (not their names), ``get_device()``
(not a ``torch.device``), ``new_empty`` (not ``torch.empty(device=...)``),
the raw current stream (not a ``Stream`` object)."""

import sys

_NUMPY = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2", "int32": "i32"}
_torch = None  # the torch module and its dtype tables, once a tensor was seen
_TORCH = {}
_TO_TORCH = {}


def _torch_tensor(x):
    """Whether ``x`` is a ``torch.Tensor`` (importing nothing)."""
    global _torch
    if _torch is None:
        torch = sys.modules.get("torch")
        if torch is None:
            return False
        _torch = torch
        _TORCH.update({torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32",
                       torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2", torch.int32: "i32"})
        _TO_TORCH.update({name: dtype for dtype, name in _TORCH.items()})
    return isinstance(x, _torch.Tensor)


def desc(x):
    """The extension's description of ``x``; a ``TypeError`` for anything else."""
    if _torch_tensor(x):
        dtype = _TORCH.get(x.dtype)
        if dtype is None:
            raise TypeError(f"rustile: torch dtype {x.dtype} is not supported (bfloat16, float16, float32, float8_e4m3fn, float8_e5m2; int32 offsets)")
        device = x.get_device()  # -1 on the CPU
        if device < 0 and not x.is_cpu:
            raise TypeError(f"rustile: tensors on {x.device} are not supported (cuda or cpu)")
        return (x.data_ptr(), x.shape, x.stride(), dtype, device)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, np.ndarray):
        dtype = _NUMPY.get(x.dtype.name)
        if dtype is None:
            raise TypeError(f"rustile: numpy dtype {x.dtype} is not supported (float16, float32; ml_dtypes' bfloat16, float8_e4m3fn, float8_e5m2; int32 offsets)")
        if any(s % x.itemsize for s in x.strides):
            raise ValueError(f"rustile: strides {x.strides} are not whole elements")
        return (x.ctypes.data, x.shape, [s // x.itemsize for s in x.strides], dtype, -1)
    raise TypeError(f"rustile: expected a torch.Tensor or numpy.ndarray, got {type(x).__name__}")


def desc_or_none(x):
    """:func:`desc` of an optional array: ``None`` stays ``None``."""
    return None if x is None else desc(x)


def stream_of(x):
    """PyTorch's current stream on ``x``'s device, as a raw handle (0, ignored, for host arrays)."""
    if _torch_tensor(x) and x.is_cuda:
        return _torch._C._cuda_getCurrentRawStream(x.get_device())
    return 0


def empty(like, shape, dtype=None):
    """An uninitialised array of ``shape`` beside ``like`` (same library and
    device), of ``like``'s dtype or ``dtype`` (``"f32"``, ``"bf16"``, ``"e4m3"``)."""
    if _torch_tensor(like):
        # new_empty: like's device and dtype without building a torch.device each call.
        return like.new_empty(shape) if dtype is None else like.new_empty(shape, dtype=_TO_TORCH[dtype])
    desc(like)  # a TypeError for what is neither a tensor nor an array
    import numpy as np

    if dtype is None:
        return np.empty(tuple(shape), dtype=like.dtype)
    if dtype == "f32":
        return np.empty(tuple(shape), dtype=np.float32)
    import ml_dtypes  # NumPy's only bfloat16 and FP8

    return np.empty(tuple(shape), dtype={"bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn}[dtype])
