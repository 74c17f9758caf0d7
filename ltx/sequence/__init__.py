"""Exact sequence parallelism for LTX stage 1 over ComfyUI's MultiGPU clones (the LTX Sequence Parallel node).

`apply_sequence_parallel(model)` (patch.py) is the one way to turn it on. Each model call's video tokens are cut
into one contiguous shard per device (shards.py); every device runs its shard through its own clone, block by
block (blocks.py); attention over video keys sees every video token through an all-gather of keys and values
between the device threads (exchange.py, attention.py); the last block gathers the shards back. run.py spreads
a call's work units (cond group x shard) over the devices with the tile path's `DeviceRanks`.
"""

from .patch import SEQUENCE_KEY, apply_sequence_parallel, has_sequence_parallel

__all__ = ["SEQUENCE_KEY", "apply_sequence_parallel", "has_sequence_parallel"]
