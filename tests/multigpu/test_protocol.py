"""The protocol's pure parts: pickles that carry tensors by value (any dtype, views without their base,
placeholders for weights that follow by broadcast), renamed pack classes, and the weight transfer's two
halves joined in one process (the real broadcasts run in the multi-process tests)."""

from __future__ import annotations

import pytest
import torch


def _tree():
    base = torch.randn(1000)
    return {"x": torch.randn(2, 3, 4), "kw": {"mask": torch.ones(1, 5, dtype=torch.bool), "rate": 25.0,
                                              "shapes": [torch.Size([1, 2]), (3, 4)]},
            "entries": [{"w": torch.randn(3).to(torch.bfloat16), "n": 3}], "t": torch.tensor(0.5),
            "empty": torch.zeros(0, 7), "half": torch.randn(5, dtype=torch.float16), "view": base[10:14]}


def _tensors(tree) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, dict):
        return [t for v in tree.values() for t in _tensors(v)]
    if isinstance(tree, (list, tuple)) and not isinstance(tree, torch.Size):
        return [t for v in tree for t in _tensors(v)]
    return []


def test_tensors_in_an_object_tree_come_back_bit_for_bit_in_any_dtype_on_the_device_asked():
    from ltx_tdp.multigpu import wire as W

    tree = _tree()
    data = W.dumps(tree)
    back = W.loads(data, device="meta")
    assert all(t.device.type == "meta" for t in _tensors(back)), "tensors did not land on the device asked"
    back = W.loads(data)
    for a, b in zip(_tensors(tree), _tensors(back), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), (a, b)
    assert back["kw"]["rate"] == 25.0 and back["kw"]["shapes"] == [torch.Size([1, 2]), (3, 4)]
    assert len(data) < 4000, f"{len(data)} bytes: the 4-element view dragged its 1000-element base along"


def test_placeholder_weights_travel_without_their_values_and_stay_parameters():
    from ltx_tdp.multigpu import wire as W

    module = torch.nn.Sequential(torch.nn.Linear(300, 300), torch.nn.LayerNorm(300))
    module.register_buffer("table", torch.arange(5.0), persistent=False)
    weights = module.state_dict(keep_vars=True)
    data = W.dumps(module, frozenset(id(t) for t in weights.values()))
    assert len(data) < 30_000, f"{len(data)} bytes: the weights (360 KB) travelled with the module"
    back = W.loads(data)
    for key, t in back.state_dict(keep_vars=True).items():
        assert t.device.type == "meta" and isinstance(t, torch.nn.Parameter), key
        assert t.shape == weights[key].shape and t.dtype == weights[key].dtype, key
    assert torch.equal(back.table, torch.arange(5.0)), "a tensor that is not a weight must keep its values"


def test_pickled_pack_classes_are_renamed_to_the_workers_package():
    from ltx_tdp.multigpu import wire as W
    from ltx_tdp.tiling import AxisTiling

    data = W.dumps(AxisTiling(2, 3))
    assert W.loads(data, "ltx_tdp", "ltx_tdp") == AxisTiling(2, 3)
    renamed = data.replace(b"ltx_tdp.tiling", b"xyz_pkg.tiling")  # as if ComfyUI named the folder xyz_pkg
    assert renamed != data
    assert W.loads(renamed, "xyz_pkg", "ltx_tdp") == AxisTiling(2, 3)


def _transfer(source: torch.nn.Module, target: torch.nn.Module | None, monkeypatch) -> dict[str, int]:
    """send_weights into receive_weights through an in-process 'broadcast'; how often each module loaded."""
    from ltx_tdp.multigpu import replica

    sent: list[torch.Tensor] = []
    names = tuple((k, t.dtype, tuple(t.shape)) for k, t in source.state_dict().items())
    replica.send_weights(iter(source.state_dict().items()), names, lambda b: sent.append(b.clone()))
    loads: dict[str, int] = {}
    for name, m in (target.named_modules() if target is not None else ()):
        monkeypatch.setattr(m, "_load_from_state_dict", _counting(m._load_from_state_dict, loads, name))
    replica.receive_weights(target, names, lambda b: b.copy_(sent.pop(0)), torch.device("cpu"), torch.device("cpu"))
    assert not sent, "the receiver took fewer weights than were sent"
    return loads


def _counting(fn, calls: dict, name: str):
    def counted(*a, **kw):
        calls[name] = calls.get(name, 0) + 1
        return fn(*a, **kw)
    return counted


def test_weights_arrive_bit_for_bit_in_any_dtype_each_module_loaded_once_on_its_own(monkeypatch):
    source = torch.nn.Sequential(torch.nn.Linear(50, 40), torch.nn.Linear(40, 30).to(torch.bfloat16),
                                 torch.nn.BatchNorm1d(30))
    target = torch.nn.Sequential(torch.nn.Linear(50, 40), torch.nn.Linear(40, 30).to(torch.bfloat16),
                                 torch.nn.BatchNorm1d(30)).to("meta")
    loads = _transfer(source, target, monkeypatch)
    for key, want in source.state_dict().items():
        got = target.state_dict()[key]
        assert got.dtype == want.dtype and torch.equal(got, want), key
    assert loads == {"0": 1, "1": 1, "2": 1}, f"each module with weights loads once, alone (a worker holds one " \
        f"module's received weights at a time): {loads}"


def test_a_worker_that_builds_another_module_names_the_weights_and_still_takes_every_broadcast(monkeypatch):
    from ltx_tdp.multigpu.settings import TDPGroupError

    source = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with pytest.raises(TDPGroupError, match=r"has no weights named 0\.weight"):
        _transfer(source, torch.nn.Sequential(torch.nn.Identity(), torch.nn.Linear(4, 4)), monkeypatch)
    _transfer(source, None, monkeypatch)  # after a failed build: every broadcast is still taken


def test_a_jobs_large_tensors_travel_after_its_pickle_straight_from_and_into_the_tensors(monkeypatch):
    """A decode's noise field (6 GB at 4K) must not become a pickle's bytes (and their copies) on either side: the
    pickle holds none of its bytes, rank 0 sends the tensor itself chunk by chunk, and the worker's empty tensor is
    filled in place, bit for bit. The broadcast is a queue here (the real one runs in the group tests); the size
    limits are scaled down (1 KiB and more travels after the pickle, in chunks of 4 KiB)."""
    from ltx_tdp.multigpu import wire as W
    from ltx_tdp.multigpu.band import receive_band, send_band

    monkeypatch.setattr(W, "BAND_MIN_BYTES", 1024)
    monkeypatch.setattr(W, "BAND_CHUNK_BYTES", 4096)
    noise = torch.randn(3, 4096 // 2 + 5, dtype=torch.bfloat16)  # 3 chunks and a bit
    job = {"noise": noise, "latent": torch.randn(4, 5), "seed": 3}
    band: list[torch.Tensor] = []
    data = W.dumps(job, band=band)
    assert len(band) == 1 and band[0] is noise, "the large tensor was copied, or not set aside"
    assert len(data) < noise.numel() * 2, f"the pickle holds {len(data)} bytes: the noise field's bytes went into it"
    wire: list[torch.Tensor] = []
    sent = send_band(band, lambda chunk: wire.append(chunk.clone()), torch.device("cpu"))
    held: list[torch.Tensor] = []
    back = W.loads(data, band=held)
    assert held[0] is back["noise"] and held[0].dtype == torch.bfloat16, "the worker's place is not the job's tensor"
    place = held[0].data_ptr()
    receive_band(held, lambda chunk: chunk.copy_(wire.pop(0)), torch.device("cpu"))
    assert sent == noise.numel() * 2 and len(W.band_chunks(noise)) == 4, f"{sent} bytes in {len(W.band_chunks(noise))}"
    assert torch.equal(back["noise"], noise) and back["noise"].data_ptr() == place, "not filled in place, bit for bit"
    assert torch.equal(back["latent"], job["latent"]) and back["seed"] == 3
