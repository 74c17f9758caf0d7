"""Hooks for issue 30's checks of the tiled VAE decode on a GPU (items 6 and 7), filled in once the decode's
reshape (ltx/vae) has landed; until then each records why it did not run.

* diffusion_noise_field (item 6): where the LTX-2.5 diffusion VAE's noise field is drawn (after ComfyUI has
  freed the transformer) and how it reaches the workers (not inside the pickled job, through host copies);
* decoded_tile_memory (item 7): a decoded tile's crop, fp32 cast and post-processing, measured against the
  decode's own estimate.
"""

from __future__ import annotations

from pathlib import Path

from runtime import Records

PENDING = "issue 30's decode items land with the tiled decode's reshape (ltx/vae); this step is their hook"


def diffusion_noise_field(rec: Records, base_dir: Path) -> None:
    rec.add("diffusion VAE noise field: placement and transfer (issue 30, item 6)", "skip", reason=PENDING)


def decoded_tile_memory(rec: Records, base_dir: Path) -> None:
    rec.add("decoded tile's peak against the decode's estimate (issue 30, item 7)", "skip", reason=PENDING)
