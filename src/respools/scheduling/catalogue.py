"""What GPU models can offer: the GPU class a model belongs to and its MIG profile catalogue.

Product strings vary by driver and form factor ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"), so a
class is derived from the family and the memory size rather than matched verbatim.
"""

from __future__ import annotations

import re

# Profiles per GPU class, from NVIDIA's MIG user guide (supported profiles tables).
MIG_PROFILES: dict[str, frozenset[str]] = {
    "a100-40gb": frozenset({"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}),
    "a100-80gb": frozenset({"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}),
    "h100-80gb": frozenset({"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}),
    "h100-94gb": frozenset({"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"}),
    "h200-141gb": frozenset({"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}),
}

ALL_MIG_PROFILES: frozenset[str] = frozenset().union(*MIG_PROFILES.values())

_FAMILY_RE = re.compile(r"\b([abhlt]\d{1,3}|v100|l40s?|rtx\s?\w+)\b", re.IGNORECASE)


def gpu_class(model: str, memory_mb: int | None = None) -> str:
    """A stable, lowercase class such as ``a100-80gb`` for a driver's product string.

    Known MIG-capable families get their memory class from ``memory_mb`` when the string lacks it;
    anything else becomes a slug of the product name so that selectors still have something to match.
    """
    text = model.lower().replace("nvidia", "").strip()
    family_match = _FAMILY_RE.search(text)
    family = family_match.group(1).replace(" ", "") if family_match else None
    size_match = re.search(r"(\d+)\s?gb", text)
    size_gb = int(size_match.group(1)) if size_match else None
    if size_gb is None and memory_mb:
        size_gb = round(memory_mb / 1024)
    if family == "a100":
        return "a100-80gb" if (size_gb or 0) > 50 else "a100-40gb"
    if family == "h100":
        return "h100-94gb" if (size_gb or 0) > 85 or "nvl" in text else "h100-80gb"
    if family == "h200":
        return "h200-141gb"
    slug = re.sub(r"[^a-z0-9]+", "-", text).strip("-")
    return slug or "unknown"


def mig_profiles_of(model: str, memory_mb: int | None = None) -> frozenset[str] | None:
    """The MIG profiles a model offers, or None when respools does not know the model."""
    return MIG_PROFILES.get(gpu_class(model, memory_mb))


def matches_class(wanted: str, model: str, memory_mb: int | None = None) -> bool:
    """A request's ``gpu_class`` matches a GPU's class exactly, or its family (``a100`` → any A100)."""
    wanted = wanted.lower()
    actual = gpu_class(model, memory_mb)
    return actual == wanted or actual.split("-")[0] == wanted
