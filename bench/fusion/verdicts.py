"""The verdicts of bench/results/fusion.md: the pack against each rebuilt Lightricks method, and whether shifted
grids earn their place."""

from __future__ import annotations

from ..quality.report import PSNR_TIE_DB, SEAM_TIE
from .config import FusionConfig
from .methods import label
from .shifted import grid_shifts
from .sweep import Results, mean

PEERS = ("ltxv_tiled_fusion", "ltxv_tiled_fusion_tdp_tiles", "ltxv_tiled_sampler")
"""The rebuilt Lightricks methods the pack is judged against."""


def adds_noise(sampler: str) -> bool:
    """Whether the sampler draws noise of its own (ancestral, SDE): then no tiled run can equal the untiled one."""
    return "ancestral" in sampler or "sde" in sampler


def _verdict(diff: float, tie: float) -> str:
    """`diff` > 0 is in the pack's favour; within `tie` of zero is a tie."""
    return "tie" if abs(diff) <= tie else ("pack better" if diff > 0 else "PACK WORSE")


def verdicts(cfg: FusionConfig, res: Results) -> list[str]:
    """The pack against each rebuilt peer method, per sampler, on the numbers that decide it: PSNR against the ground
    truth at 2S, PSNR against the untiled refine at S (samplers without noise of their own only), |seam excess|
    at 2S and S, and the tokens."""
    out_case, in_case = (c.name for c in cfg.cases())
    lines = [f"## Verdicts (tie: PSNR within {PSNR_TIE_DB} dB, seam excess within {SEAM_TIE})", "",
             "What they mean, in plain words: docs/benchmarks.md, *Against Lightricks' tiled samplers*.", "",
             "Seam: |seam excess over untiled| (a smoother band than untiled counts as a deviation too). PSNR at S "
             "against untiled only for samplers without noise of their own: with euler_ancestral or dpmpp_2m_sde the "
             "pack draws the untiled run's noise (one canvas, one seed) and every Lightricks method other noise, so "
             "there it measures the noise, not the tiling. Tokens: per refine at 2S, against the pack's.", ""]
    for peer in PEERS:
        lines += [f"**pack vs {label(cfg, peer)}**", ""]
        found: list[str] = []  # every verdict of this peer, for the count below

        def judged(diff: float, tie: float) -> str:
            found.append(_verdict(diff, tie))
            return found[-1]

        for s in cfg.samplers:
            g = lambda a, m, c=out_case: mean(res.rows, a, case=c, sampler=s, method=m)  # noqa: E731
            parts = [f"PSNR vs ground truth (2S) {g('psnr', 'tdp'):.2f} vs {g('psnr', peer):.2f} dB "
                     f"({judged(g('psnr', 'tdp') - g('psnr', peer), PSNR_TIE_DB)})"]
            if not adds_noise(s):
                diff = g("psnr", "tdp", in_case) - g("psnr", peer, in_case)
                parts.append(f"PSNR vs untiled (S) {g('psnr', 'tdp', in_case):.2f} vs {g('psnr', peer, in_case):.2f} dB "
                             f"({judged(diff, PSNR_TIE_DB)})")
            for c, name in ((out_case, "2S"), (in_case, "S")):
                a, b = g("seam_excess", "tdp", c), g("seam_excess", peer, c)
                parts.append(f"seam excess ({name}) {a:+.3f} vs {b:+.3f} ({judged(abs(b) - abs(a), SEAM_TIE)})")
            parts.append(f"tokens x{g('tokens', peer) / g('tokens', 'tdp'):.2f}")
            lines.append(f"* {s}: " + "; ".join(parts) + ".")
        lines += ["", f"In all: pack better in {found.count('pack better')}, tie in {found.count('tie')}, "
                  f"pack worse in {found.count('PACK WORSE')} of these {len(found)} comparisons.", ""]
    return lines


def shifted_verdict(cfg: FusionConfig, res: Results) -> list[str]:
    """Shifted grids are kept only if, at equal cost, they lower the seam: |seam excess over untiled| at their own
    edges lower than the pack's at its own by more than the tie in every (sampler, case), with PSNR (against the
    case's reference) no more than the tie lower anywhere. The seam score at one common set of lines (the pack's
    edges at every shift, `common_edges`) is shown beside it: the same lines for every method."""
    cases = [c.name for c in cfg.cases()]
    grid = [f"tdp_grid_cycle{c}" for c in cfg.grid_cycles]
    head = ("| sampler | case | " + " | ".join(f"{n}: seam excess, own edges / common lines / PSNR" for n in
                                              ("pack", *(f"cycle {c}" for c in cfg.grid_cycles))) + " | tokens equal |")
    lines = [head, "|---|---" + "|---:" * (1 + len(grid)) + "|---|"]
    seams, psnrs = {m: [] for m in grid}, {m: [] for m in grid}
    for s in cfg.samplers:
        for case in cases:
            g = lambda a, m: mean(res.rows, a, case=case, sampler=s, method=m)  # noqa: E731
            cell = lambda m: (f"{g('seam_excess', m):+.3f} / {g('seam_common', m) - g('seam_common', 'full'):+.3f} / "  # noqa: E731
                              f"{g('psnr', m):.2f}")
            for m in grid:
                seams[m].append(abs(g("seam_excess", m)) - abs(g("seam_excess", "tdp")))
                psnrs[m].append(g("psnr", m) - g("psnr", "tdp"))
            tokens = {g("tokens", m) for m in ("tdp", *grid)}
            lines.append(f"| {s} | {case} | " + " | ".join(cell(m) for m in ("tdp", *grid))
                         + f" | {'yes' if len(tokens) == 1 else 'NO'} |")
    lines.append("")
    for c, m in zip(cfg.grid_cycles, grid):
        d, p = seams[m], psnrs[m]
        lower = sum(x < -SEAM_TIE for x in d)
        keep = lower == len(d) and min(p) >= -PSNR_TIE_DB
        lines.append(f"* grid cycle {c} (shifts {', '.join(map(str, grid_shifts(c, cfg.overlap)))}): |seam excess| "
                     f"{sum(d) / len(d):+.4f} against the pack's on average, lower beyond the tie in {lower} of {len(d)}, "
                     f"{max(d):+.4f} at worst; PSNR {min(p):+.2f} to {max(p):+.2f} dB against the pack's: "
                     + ("**keep** (a lower seam at equal cost)." if keep else "**measured and left out**."))
    return lines
