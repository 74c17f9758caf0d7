"""The protocol's pure parts: tensors out of and back into object trees, byte packing, renamed pickles,
weight buckets."""

from __future__ import annotations

import pickle

import torch


def test_tensors_leave_an_object_tree_and_come_back_bit_for_bit_in_any_dtype():
    from ltx_tdp.multigpu import wire as P

    tree = {"x": torch.randn(2, 3, 4), "kw": {"mask": torch.ones(1, 5, dtype=torch.bool), "rate": 25.0,
                                               "shapes": [torch.Size([1, 2]), (3, 4)]},
            "entries": [{"w": torch.randn(3).to(torch.bfloat16), "n": 3}], "t": torch.tensor(0.5),
            "empty": torch.zeros(0, 7), "half": torch.randn(5, dtype=torch.float16)}
    tensors: list[torch.Tensor] = []
    skeleton = P.split_tensors(tree, tensors)
    assert not any(isinstance(v, torch.Tensor) for v in pickle.loads(pickle.dumps(skeleton))["kw"].values())
    specs, nbytes = P.layout(tensors)
    assert all(s.offset % P.ALIGN == 0 for s in specs), [s.offset for s in specs]
    buffer = P.pack(tensors, specs, nbytes, "cpu")
    back = P.join_tensors(pickle.loads(pickle.dumps(skeleton)), [P.unpack(buffer, s) for s in specs])
    for a, b in zip(tensors, _flatten(back), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), (a, b)
    assert back["kw"]["rate"] == 25.0 and back["kw"]["shapes"] == [torch.Size([1, 2]), (3, 4)]


def _flatten(tree) -> list[torch.Tensor]:
    from ltx_tdp.multigpu import wire as P

    out: list[torch.Tensor] = []
    P.split_tensors(tree, out)
    return out


def test_pickled_pack_classes_are_renamed_to_the_workers_package():
    from ltx_tdp.multigpu import wire as P
    from ltx_tdp.tiling import AxisTiling

    data = P.dumps(AxisTiling(2, 3))
    assert P.loads(data, "ltx_tdp", "ltx_tdp") == AxisTiling(2, 3)
    renamed = data.replace(b"ltx_tdp.tiling", b"xyz_pkg.tiling")  # as if ComfyUI named the folder xyz_pkg
    assert renamed != data
    assert P.loads(renamed, "xyz_pkg", "ltx_tdp") == AxisTiling(2, 3)


def test_weight_buckets_hold_every_weight_once_within_the_size_limit():
    from ltx_tdp.multigpu.replica import fill_bucket, plan_buckets

    weights = [(f"w{i}", torch.randn(i + 1, 7)) for i in range(20)] + [("big", torch.randn(100, 100))]
    entries, sizes = plan_buckets(weights, bucket_bytes=1000)
    assert [e.key for e in entries] == [k for k, _ in weights]
    assert all(size <= 1000 for size, b in zip(sizes, range(len(sizes)))
               if sum(e.bucket == b for e in entries) > 1), sizes
    source = iter(weights)
    buckets = []
    for index, size in enumerate(sizes):
        bucket = torch.empty(size, dtype=torch.uint8)
        fill_bucket(bucket, index, entries, source)
        buckets.append(bucket)
    for (key, tensor), e in zip(weights, entries):
        got = buckets[e.bucket][e.spec.offset:e.spec.offset + e.spec.nbytes].view(e.spec.dtype).view(e.spec.shape)
        assert torch.equal(got, tensor), key
