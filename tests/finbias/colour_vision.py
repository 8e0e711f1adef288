"""Colour-vision simulation for tests: Machado, Oliveira & Fernandes (2009), "A physiologically-based
model for simulation of color vision deficiency", IEEE TVCG 15(6), Table 1 at severity 1.0, applied
to linear sRGB; distances as CIE76 Delta E in CIELAB (D65). Written here from the published matrices,
apart from the palette it checks (finlib.finbias.figures.base)."""

from __future__ import annotations

import numpy as np

MACHADO_2009 = {
    "normal": np.eye(3),
    "protanopia": np.array(
        [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]]
    ),
    "deuteranopia": np.array(
        [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]]
    ),
    "tritanopia": np.array(
        [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]]
    ),
}
SRGB_TO_XYZ = np.array(
    [[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750], [0.0193339, 0.1191920, 0.9503041]]
)
WHITE_D65 = np.array([0.95047, 1.0, 1.08883])


def hex_to_linear(colour: str) -> np.ndarray:
    c = np.array([int(colour.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4)])
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def lab(linear_rgb: np.ndarray) -> np.ndarray:
    t = SRGB_TO_XYZ @ linear_rgb / WHITE_D65
    f = np.where(t > (6 / 29) ** 3, np.cbrt(t), t / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def seen(colour: str, vision: str) -> np.ndarray:
    """CIELAB of `colour` as a viewer with `vision` sees it."""
    return lab(np.clip(MACHADO_2009[vision] @ hex_to_linear(colour), 0, 1))


def delta_e(a: str, b: str, vision: str) -> float:
    return float(np.linalg.norm(seen(a, vision) - seen(b, vision)))


def worst_pair(colours: dict[str, str]) -> tuple[float, str, str, str]:
    """(smallest Delta E, vision, name a, name b) over every pair and every simulated vision."""
    names = list(colours)
    return min(
        (delta_e(colours[a], colours[b], v), v, a, b)
        for v in MACHADO_2009
        for i, a in enumerate(names)
        for b in names[i + 1 :]
    )
