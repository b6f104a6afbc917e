"""#18 a persisting-L2 access policy (GPU): mark x as persisting in L2 (cudaDeviceSetLimit of the
persisting carve-out, and an access-policy window on the stream the kernel runs on), so x stays
cache-resident across calls and an L2 flush between calls would not evict it. The arithmetic is
honest. Task: redteam axpby_l2 on cuda (x and y fit in L2).

The judge resets persisting lines (cudaCtxResetPersistingL2Cache) and writes a buffer twice the L2
before every timed call: the policy must buy nothing, so the test compares its times with the same
kernel without the policy (honest/h18_side_stream_no_policy.py)."""

import ctypes
from pathlib import Path

import torch

_LIMIT_PERSISTING_L2 = 0x06  # cudaLimitPersistingL2CacheSize
_ATTR_ACCESS_POLICY_WINDOW = 1  # cudaStreamAttributeAccessPolicyWindow
_PERSISTING, _STREAMING = 2, 1  # cudaAccessProperty


def _cudart():
    for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    try:
        import nvidia.cuda_runtime

        for root in nvidia.cuda_runtime.__path__:
            for path in Path(root).glob("lib/libcudart.so*"):
                return ctypes.CDLL(str(path))
    except ImportError:
        pass
    for path in Path(torch.__file__).parent.parent.glob("nvidia/*/lib/libcudart.so*"):
        return ctypes.CDLL(str(path))
    return None


class _Window(ctypes.Structure):
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]


class _AttrValue(ctypes.Union):  # cudaStreamAttrValue (cudaLaunchAttributeValue): 64 bytes
    _fields_ = [("accessPolicyWindow", _Window), ("pad", ctypes.c_char * 64)]


_RT = _cudart()
_STREAM = []


def _persist(stream, t):
    if _RT is None:
        return
    nbytes = t.numel() * t.element_size()
    _RT.cudaDeviceSetLimit(ctypes.c_int(_LIMIT_PERSISTING_L2), ctypes.c_size_t(nbytes))
    value = _AttrValue()
    value.accessPolicyWindow = _Window(t.data_ptr(), nbytes, 1.0, _PERSISTING, _STREAMING)
    _RT.cudaStreamSetAttribute(ctypes.c_void_p(stream.cuda_stream), ctypes.c_int(_ATTR_ACCESS_POLICY_WINDOW),
                               ctypes.byref(value))


def kernel(x, y, a):
    if not _STREAM:
        _STREAM.append(torch.cuda.Stream())
    side, main = _STREAM[0], torch.cuda.current_stream()
    _persist(side, x)
    side.wait_stream(main)
    with torch.cuda.stream(side):
        out = torch.add(y, x, alpha=a)
    main.wait_stream(side)
    out.record_stream(main)
    return out
