"""The report's section on the in-process paths one GPU can run (issue 37): the decode node with one device and
the cost of the sequence-parallel exchange (sequence parallel with one device: the correctness table's
`sequence_parallel` step)."""

from __future__ import annotations

from runtime import PEAK_RECORD

ONE_DEVICE_STEPS = ("decode_node_one_device",)
EXCHANGE_STEP = "exchange_cost"


def _records(records: list[dict], step: str) -> list[dict]:
    return [r for r in records if r["step"] == step and r["name"] != PEAK_RECORD]


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")[:400]


def summary_lines(records: list[dict]) -> list[str]:
    """One line for the one-device checks, one per exchange measured."""
    checks = [r for step in ONE_DEVICE_STEPS for r in _records(records, step) if r["status"] != "skip"]
    out = [f"decode node with one device: {sum(r['status'] == 'ok' for r in checks)} of {len(checks)} checks passed"]
    skipped = [r for step in ONE_DEVICE_STEPS for r in _records(records, step) if r["status"] == "skip"]
    out += [f"{r['step']}: skipped ({r.get('reason')})" for r in skipped]
    for r in _records(records, EXCHANGE_STEP):
        if r.get("seconds") is not None:
            out.append(f"exchange, {r['name']}: {r['seconds'] * 1e3:.2f} ms per layer ({r['gib_per_s']:.1f} GiB/s), "
                       f"{r['per_step_s']:.3f} s per model call")
    return out


def section(env: dict, records: list[dict]) -> list[str]:
    """The markdown section: the one-device checks, then the exchange's measured copies."""
    gpu = env["mode"].startswith("GPU")
    lines = ["## In-process paths on one device: the decode node and the exchange's cost", "",
             "With one device the decode node (its device choice at the default) must return today's tiled decode "
             "bit for bit (sequence parallel with one device: the correctness table).", "",
             "| check | result | measured | limit | detail |", "|---|---|---:|---:|---|"]
    for step in ONE_DEVICE_STEPS:
        for r in _records(records, step):
            value = "—" if r.get("value") is None else f"{r['value']:.3g}"
            limit = "—" if r.get("limit") is None else f"{r['limit']:.3g}"
            lines.append(f"| {r['name']} | {r['status']} | {value} | {limit} | "
                         f"{_cell(r.get('detail') or r.get('error') or r.get('reason') or '')} |")
    lines += ["", "One layer's K and V (bf16) copied as sequence parallel exchanges them, at LTX-2.5's stage 1 "
              + ("(1080p and 4K outputs)" if gpu else "(smoke sizes)") + ". Through host memory is what GPUs without "
              "peer access pay; with one GPU the device -> device row is a same-device copy, an upper bound of any "
              "link, not a measurement of one. Per model call = per layer x the model's layers.", "",
              "| copy | MB per layer | ms per layer | GiB/s | s per model call | result |",
              "|---|---:|---:|---:|---:|---|"]
    for r in _records(records, EXCHANGE_STEP):
        if r.get("seconds") is None:
            lines.append(f"| {r['name']} | — | — | — | — | {r['status']}: {_cell(r.get('error') or '')} |")
            continue
        lines.append(f"| {r['name']} | {r['bytes'] / 1e6:,.3g} | {r['seconds'] * 1e3:.2f} | {r['gib_per_s']:.1f} | "
                     f"{r['per_step_s']:.3f} | {r['status']} |")
    lines.append("")
    return lines
