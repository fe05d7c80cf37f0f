"""The wire format of embodia's policy servers: openpi-client's msgpack_numpy, reimplemented.

msgpack maps; a numpy array travels as the map ``{b"__ndarray__": True, b"data": raw bytes,
b"dtype": dtype.str, b"shape": [...]}`` and a numpy scalar as ``{b"__npgeneric__": True, b"data":
value, b"dtype": dtype.str}``. Only bool, int, uint and float dtypes are accepted (an object dtype
rebuilt from bytes would be a pointer), and the byte count must match the shape. No pickle anywhere.

A leaf: it imports numpy and msgpack only, so a server running in another environment (the LeRobot
side, `embodia.policies.lerobot_server`) loads this file by its path without importing embodia.

>>> unpackb(packb({"a": np.arange(3, dtype=np.float32)}))["a"].tolist()
[0.0, 1.0, 2.0]
"""
from __future__ import annotations

import math

import msgpack
import numpy as np

_KINDS = frozenset("biuf")      # bool, signed, unsigned, float


def _dtype(s) -> np.dtype:
    try:
        dt = np.dtype(s) if isinstance(s, str) else None
    except TypeError:
        dt = None
    if dt is None or dt.kind not in _KINDS:
        raise ValueError(f"array dtype {s!r} is not allowed (bool, int, uint and float only)")
    return dt


def _encode(obj):
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind not in _KINDS:
        raise TypeError(f"cannot send a {obj.dtype} array (bool, int, uint and float only)")
    if isinstance(obj, np.ndarray):
        return {b"__ndarray__": True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": list(obj.shape)}
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot send a {type(obj).__name__}")


def _decode(m: dict):
    if b"__ndarray__" in m:
        dt, shape, data = _dtype(m.get(b"dtype")), m.get(b"shape"), m.get(b"data")
        if not isinstance(shape, (list, tuple)) or not all(type(n) is int and n >= 0 for n in shape):
            raise ValueError(f"array shape {shape!r} is not a list of non-negative ints")
        if not isinstance(data, bytes) or len(data) != dt.itemsize * math.prod(shape):
            raise ValueError(f"array data holds {len(data) if isinstance(data, bytes) else type(data).__name__} "
                             f"bytes, shape {list(shape)} of {dt} needs {dt.itemsize * math.prod(shape)}")
        return np.frombuffer(data, dt).reshape(shape).copy()      # a copy: writable, owns its memory
    if b"__npgeneric__" in m:
        return _dtype(m.get(b"dtype")).type(m.get(b"data"))
    return m


def packb(obj) -> bytes:
    """msgpack bytes of ``obj`` (maps, lists, str, numbers, numpy arrays and scalars)."""
    return msgpack.packb(obj, default=_encode, use_bin_type=True)


def unpackb(data: bytes):
    """The object in one msgpack frame; ValueError naming the problem for anything malformed."""
    try:
        return msgpack.unpackb(data, object_hook=_decode, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise ValueError(f"malformed message: {e}") from None
