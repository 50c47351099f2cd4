"""The served-model entries of the shipped example inventories (inventory/*/group_vars/*.yml), with the
capability of the group that carries them, for the tests that render and parse them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

INVENTORIES = Path(__file__).resolve().parent.parent / "inventory"


@dataclass(frozen=True)
class Entry:
    inventory: str
    group: str
    capability: str
    index: int
    model: dict

    @property
    def where(self) -> str:
        return f"inventory/{self.inventory}/group_vars/{self.group}.yml: sglang_service_models[{self.index}]"


def model_entries() -> list[Entry]:
    """Every entry of sglang_service_models in a group_vars file that also names gpu_capability."""
    entries = []
    for path in sorted(INVENTORIES.glob("*/group_vars/*.yml")):
        data = yaml.safe_load(path.read_text()) or {}
        for index, model in enumerate(data.get("sglang_service_models") or []):
            assert "gpu_capability" in data, f"{path}: models without the group's gpu_capability"
            entries.append(Entry(path.parent.parent.name, path.stem, data["gpu_capability"], index, model))
    return entries
