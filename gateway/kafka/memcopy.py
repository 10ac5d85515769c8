"""One byte copy for the compiled loops: ``memcpy`` from numba code.

numba compiles a slice assignment between byte arrays (``out[a:b] = data[c:d]``) to a generic
element loop, and a hand-written byte loop is not vectorised either: measured on the HTTP
benchmark's values (~200 B each, 1 MiB in all), 0.34 ms and 1.24 ms per MiB, against 0.03 ms
for ``memcpy``. The record loop copies every key and value this way, and the JSON writer every
piece of fixed text and every base64 field.

:func:`copy` checks nothing: each caller has checked both ranges first (its docstring says
how), as it did before for the slice it replaces, which numba does not bound-check either.
numba keys a cached function on its own source file: after a change here, clear the callers'
caches (``__pycache__/*.nbi``, ``*.nbc``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _typed(typingctx: Any, dst: Any, dst_at: Any, src: Any, src_at: Any, n: Any) -> Any:  # noqa: PLR0917
    """``dst[dst_at : dst_at + n] = src[src_at : src_at + n]``: C-contiguous uint8 arrays, the
    ranges inside them and not overlapping (unchecked)."""
    for array in (dst, src):
        if not isinstance(array, types.Array) or (array.dtype, array.layout) != (types.uint8, "C"):
            return None
    sig = types.void(dst, types.intp, src, types.intp, types.intp)
    memcpy: Any = cgutils.raw_memcpy  # untyped in numba

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        d, d_at, s, s_at, count = args
        to = context.make_array(signature.args[0])(context, builder, d)
        of = context.make_array(signature.args[2])(context, builder, s)
        memcpy(builder, builder.gep(to.data, [d_at]), builder.gep(of.data, [s_at]), count, 1)
        return context.get_dummy_value()

    return sig, codegen


copy = cast(Callable[[Any, int, Any, int, int], None], intrinsic(_typed))
"""See :func:`_typed`; callable from numba code only."""
