"""One look and one file format for every figure: the style, PNG and SVG saving, the Figure
record and its manifest, variant colours and short number labels."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

MANIFEST = "figures.json"
BASELINE_COLOR = "black"


class NoData(ValueError):
    """The tables lack what a figure needs; the message says what is missing."""


@dataclass(frozen=True)
class Figure:
    """One figure of a worklog: its files (relative names) or why it was not drawn."""

    name: str
    title: str
    caption: str = ""
    png: str | None = None
    svg: str | None = None
    skipped: str | None = None

    @property
    def drawn(self) -> bool:
        return self.png is not None


def style() -> None:
    """One look for every figure; SVG keeps its text as text and carries no date."""
    sns.set_theme(context="notebook", style="whitegrid", font_scale=0.9)
    plt.rcParams.update(
        {
            "svg.fonttype": "none",
            "svg.hashsalt": "kernelbook",
            "figure.dpi": 100,
            "savefig.dpi": 150,
            "savefig.bbox": "tight",
            "axes.titleweight": "bold",
        }
    )


def save(fig, outdir: str | Path, name: str, title: str, caption: str = "") -> Figure:
    """Write ``fig`` as <outdir>/<name>.png and .svg, close it, and describe it."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    fig.savefig(outdir / f"{name}.png", metadata={"Software": None})
    fig.savefig(outdir / f"{name}.svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return Figure(name, title, caption, png=f"{name}.png", svg=f"{name}.svg")


def write_manifest(outdir: str | Path, figures: list[Figure]) -> Path:
    """figures.json beside the files: how a study's own notebook hands its figures over."""
    path = Path(outdir) / MANIFEST
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([asdict(f) for f in figures], indent=1) + "\n")
    return path


def read_manifest(outdir: str | Path) -> list[Figure]:
    path = Path(outdir) / MANIFEST
    if not path.is_file():
        return [
            Figure(
                p.stem, p.stem.replace("_", " "), png=p.name, svg=_if_file(p.with_suffix(".svg"))
            )
            for p in sorted(Path(outdir).glob("*.png"))
        ]
    return [Figure(**item) for item in json.loads(path.read_text())]


def _if_file(p: Path) -> str | None:
    return p.name if p.is_file() else None


def palette(order: list[str]) -> dict[str, tuple]:
    """A fixed colour per variant, by its place in the ladder (the same in every figure)."""
    colors = sns.color_palette("tab20" if len(order) > 10 else "tab10", max(len(order), 1))
    return {v: colors[i % len(colors)] for i, v in enumerate(order)}


def num(x) -> float:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return math.nan
    return x


def compact(x, digits: int = 3) -> str:
    """A short label for a number: 0.0123, 12.3, 1.23k, 4.56M, 7.89G."""
    x = num(x)
    if math.isnan(x):
        return "n/a"
    a = abs(x)
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e4, "k")):
        if a >= scale:
            return f"{x / (scale if suffix != 'k' else 1e3):.{digits}g}{suffix}"
    return f"{x:.{digits}g}"
