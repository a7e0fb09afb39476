"""_library.py - the suite's kernels, loaded with ctypes from the shared library `make python` builds.

The library is python/csrc/flash_steps_shim.c linked over the kernels' own static libraries (python/CMakeLists.txt).
Its four functions take a problem (the struct Problem mirrors fs_problem field by field) and tensors as a pointer
plus four strides in elements (Tensor4 mirrors fs_tensor). Where the library is looked for, first hit wins:
  $FLASH_STEPS_LIBRARY, then build-python/lib/ and build/lib/ at the repository's root.
It is loaded on first use, after PyTorch, so that the two share one CUDA runtime.
"""
import ctypes
import os

import torch

LIBRARY_NAME = "libflash_steps_c.so"
DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}   # FA_DTYPE_FP32, FP16, BF16 (common/fa_half.h)
WHY_LENGTH = 512


class Problem(ctypes.Structure):
    _fields_ = [("B", ctypes.c_int64), ("H", ctypes.c_int64), ("H_kv", ctypes.c_int64), ("Sq", ctypes.c_int64),
                ("Sk", ctypes.c_int64), ("D", ctypes.c_int64), ("causal", ctypes.c_int32), ("scale", ctypes.c_float),
                ("window_left", ctypes.c_int64), ("window_right", ctypes.c_int64), ("softcap", ctypes.c_float),
                ("dtype", ctypes.c_int32), ("on_gpu", ctypes.c_int32), ("deterministic", ctypes.c_int32)]


class Tensor4(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("stride_b", ctypes.c_int64), ("stride_h", ctypes.c_int64),
                ("stride_s", ctypes.c_int64), ("stride_d", ctypes.c_int64)]


def tensor4(x):
    """A [B, H, S, D] torch tensor as the shim's fs_tensor."""
    return Tensor4(x.data_ptr(), *x.stride())


def candidates():
    if os.environ.get("FLASH_STEPS_LIBRARY"):
        return [os.environ["FLASH_STEPS_LIBRARY"]]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return [os.path.join(root, folder, "lib", LIBRARY_NAME) for folder in ("build-python", "build")]


_library = None


def library():
    global _library
    if _library is not None:
        return _library
    found = [path for path in candidates() if os.path.isfile(path)]
    if not found:
        raise RuntimeError("flash_steps: the kernels' library is not built (looked for " + ", ".join(candidates()) +
                           "); run `make python` at the repository's root, or set FLASH_STEPS_LIBRARY")
    lib = ctypes.CDLL(found[0])
    p_problem, p_tensor, p_float = ctypes.POINTER(Problem), ctypes.POINTER(Tensor4), ctypes.POINTER(ctypes.c_float)
    lib.fs_check.argtypes = [p_problem, ctypes.c_char_p, ctypes.c_size_t]
    lib.fs_check.restype = ctypes.c_int
    lib.fs_kernel_name.argtypes = [p_problem]
    lib.fs_kernel_name.restype = ctypes.c_char_p
    lib.fs_forward.argtypes = [p_problem, p_tensor, p_tensor, p_tensor, p_tensor, p_float, p_float]
    lib.fs_forward.restype = None
    lib.fs_backward.argtypes = [p_problem, p_tensor, p_tensor, p_tensor, p_tensor, p_float, p_float, p_tensor,
                                p_float, p_tensor, p_tensor, p_tensor]
    lib.fs_backward.restype = None
    _library = lib
    return lib


def float_pointer(x):
    return ctypes.cast(x.data_ptr(), ctypes.POINTER(ctypes.c_float))


def check(problem):
    """None when the kernels take this problem, else the one line that says why not."""
    why = ctypes.create_string_buffer(WHY_LENGTH)
    if library().fs_check(ctypes.byref(problem), why, WHY_LENGTH) == 0:
        return None
    return why.value.decode()


def kernel_name(problem):
    return library().fs_kernel_name(ctypes.byref(problem)).decode()


def forward(problem, q, k, v, o, lse, lse_residual):
    library().fs_forward(ctypes.byref(problem), tensor4(q), tensor4(k), tensor4(v), tensor4(o), float_pointer(lse),
                         float_pointer(lse_residual))


def backward(problem, q, k, v, o, lse, lse_residual, dout, delta, dq, dk, dv):
    library().fs_backward(ctypes.byref(problem), tensor4(q), tensor4(k), tensor4(v), tensor4(o), float_pointer(lse),
                          float_pointer(lse_residual), tensor4(dout), float_pointer(delta), tensor4(dq), tensor4(dk),
                          tensor4(dv))
