"""Profiled operators by class (matmul, attention, elementwise, memory, optimizer, other): what
``update_profile`` and ``roofline`` sum a profile's self times into."""

from __future__ import annotations

CLASSES = ("matmul", "attention", "elementwise", "memory", "optimizer", "other")

# Operator names (the part after "aten::" / "mkldnn::"), matched as prefixes, in this order.
_PATTERNS = (
    ("attention", ("scaled_dot_product", "_scaled_dot_product", "_flash_attention")),
    (
        "matmul",
        ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_mkldnn", "mkldnn_", "_linear"),
    ),
    ("optimizer", ("_fused_adam", "_foreach_", "adam")),
    (
        "memory",
        (
            "copy_",
            "_copy",
            "fill_",
            "zero_",
            "zeros",
            "ones",
            "full",
            "empty",
            "cat",
            "stack",
            "index",
            "gather",
            "scatter",
            "clone",
            "contiguous",
            "_to_copy",
            "to",
            "masked_",
            "new_",
            "resize_",
            "as_strided",
            "slice",
            "select",
            "narrow",
            "expand",
            "view",
            "reshape",
            "permute",
            "transpose",
            "t",
            "unsqueeze",
            "squeeze",
            "split",
            "chunk",
            "unbind",
            "detach",
            "_reshape_alias",
            "alias",
            "set_",
            "embedding",
        ),
    ),  # fmt: skip
    (
        "elementwise",
        (
            "add",
            "sub",
            "mul",
            "div",
            "neg",
            "pow",
            "rsqrt",
            "sqrt",
            "exp",
            "log",
            "silu",
            "sigmoid",
            "tanh",
            "gelu",
            "relu",
            "softmax",
            "_softmax",
            "log_softmax",
            "_log_softmax",
            "mean",
            "sum",
            "max",
            "min",
            "amax",
            "clamp",
            "where",
            "rms_norm",
            "_fused_rms_norm",
            "layer_norm",
            "native_layer_norm",
            "threshold",
            "cos",
            "sin",
            "sign",
            "abs",
            "reciprocal",
            "maximum",
            "minimum",
            "eq",
            "ne",
            "lt",
            "le",
            "gt",
            "ge",
            "logsumexp",
            "norm",
            "rsub",
            "_unsafe_view",
            "lerp",
            "addcmul",
            "addcdiv",
        ),
    ),  # fmt: skip
)


def op_class(name: str) -> str:
    """The class of a profiled operator (``aten::mm``, ``SiluBackward0``, ``mkldnn::_linear``)."""
    base = name.split("::", 1)[-1]
    if name.endswith("Backward0") or name.endswith("Backward1"):  # autograd nodes: wrappers
        base = name[: -len("Backward0")].lower()
    for cls, prefixes in _PATTERNS:
        for p in prefixes:
            if base == p or base.startswith(p + "_") or (len(p) > 3 and base.startswith(p)):
                return cls
    return "other"
