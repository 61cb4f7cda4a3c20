"""PyTorch tensors and NumPy arrays as the extension sees them: a tuple
``(address, shape, strides in elements, dtype, device)``, device the CUDA
ordinal or -1 for host memory. Neither library is imported unless the
caller's array is one of its own."""

import sys

_TORCH = {"torch.bfloat16": "bf16", "torch.float16": "f16", "torch.float32": "f32"}
_NUMPY = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}
_TO_TORCH = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}


def _is_torch(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def desc(x):
    """The extension's description of ``x``; a ``TypeError`` for anything else."""
    if _is_torch(x):
        dtype = _TORCH.get(str(x.dtype))
        if dtype is None:
            raise TypeError(f"rustile: torch dtype {x.dtype} is not supported (bfloat16, float16, float32)")
        if x.device.type not in ("cuda", "cpu"):
            raise TypeError(f"rustile: tensors on {x.device} are not supported (cuda or cpu)")
        device = x.device.index if x.device.type == "cuda" else -1
        return (x.data_ptr(), list(x.shape), list(x.stride()), dtype, 0 if device is None else device)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, np.ndarray):
        dtype = _NUMPY.get(x.dtype.name)
        if dtype is None:
            raise TypeError(f"rustile: numpy dtype {x.dtype} is not supported (ml_dtypes.bfloat16, float16, float32)")
        if any(s % x.itemsize for s in x.strides):
            raise ValueError(f"rustile: strides {x.strides} are not whole elements")
        return (x.ctypes.data, list(x.shape), [s // x.itemsize for s in x.strides], dtype, -1)
    raise TypeError(f"rustile: expected a torch.Tensor or numpy.ndarray, got {type(x).__name__}")


def stream_of(x):
    """PyTorch's current stream on ``x``'s device (0, ignored, for host arrays)."""
    if _is_torch(x) and x.is_cuda:
        import torch

        return torch.cuda.current_stream(x.device).cuda_stream
    return 0


def empty(like, shape, dtype=None):
    """An uninitialised array of ``shape`` beside ``like`` (same library and
    device), of ``like``'s dtype or ``dtype`` (``"f32"``)."""
    desc(like)  # a TypeError for what is neither a tensor nor an array
    shape = tuple(int(s) for s in shape)
    if _is_torch(like):
        import torch

        return torch.empty(shape, dtype=like.dtype if dtype is None else getattr(torch, _TO_TORCH[dtype]), device=like.device)
    import numpy as np

    return np.empty(shape, dtype=like.dtype if dtype is None else np.float32)
