"""prepare.sh's check of a repacked comfy-kitchen (no compiled kernels): it imports, and an int8-convrot linear
(the LTX-2.5 templates' format) computes with its eager backend on the CPU what the dequantized weight gives.

    PYTHONPATH=<where the wheel is installed> python bench/gpu/kitchen_check.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def main() -> None:
    import comfy_kitchen as ck
    from comfy_kitchen.backends import cuda
    from comfy_kitchen.tensor import QuantizedTensor

    assert cuda._C is None, f"{ck.__file__}: this comfy-kitchen still has its compiled CUDA kernels"

    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(64, 512, generator=gen) / 512**0.5
    x = torch.randn(8, 512, generator=gen)
    q = QuantizedTensor.from_float(weight, "TensorWiseINT8Layout", per_channel=True, convrot=True,
                                   convrot_groupsize=256)
    got = F.linear(x, q)
    want = F.linear(x, q.dequantize().to(x.dtype))
    err = ((got - want).abs().max() / want.abs().max()).item()
    rot = ((q.dequantize().float() - weight).abs().max() / weight.abs().max()).item()
    assert err < 2e-2 and rot < 2e-2, f"int8-convrot linear: {err:.3e} from its own weight, weight error {rot:.3e}"
    usable = sorted(k for k, v in ck.list_backends().items() if v["available"] and not v["disabled"])
    print(f"[prepare] comfy-kitchen without compiled kernels ({ck.__file__}) imports (backends computing here: "
          f"{', '.join(usable)}); an int8-convrot linear on the CPU is within {err:.1e} of its dequantized weight "
          f"(weight error {rot:.1e})")


if __name__ == "__main__":
    main()
