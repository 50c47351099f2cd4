"""The served-model entries of the shipped example inventories (inventory/*/group_vars/*.yml), with the
capability of the group that carries them, for the tests that render and parse them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from ansible.module_utils.model_weights import parse_source, staged_dir
from ansible.module_utils.sglang_cmdline import STAGED_PATH_KEYS

REPO = Path(__file__).resolve().parent.parent
INVENTORIES = REPO / "inventory"
# where the model_weights role stages weights unless told otherwise (its default, read, not restated)
WEIGHTS_DEFAULTS = REPO / "roles" / "model_weights" / "defaults" / "main.yml"
WEIGHTS_ROOT = yaml.safe_load(WEIGHTS_DEFAULTS.read_text())["model_weights_root"]


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

    @property
    def staged(self) -> dict:
        """What the model_weights role publishes for this entry once it staged its sources
        (model_weights_staged: {name: {model_path, draft_model_path}}), from the role's own functions."""
        here = {}
        for key, path_key in STAGED_PATH_KEYS:
            if self.model.get(key):
                source = parse_source(self.model[key], f"{self.where}.{key}")
                here[path_key] = staged_dir(WEIGHTS_ROOT, source)
        return {self.model["name"]: here} if here else {}


def model_entries() -> list[Entry]:
    """Every entry of sglang_service_models in a group_vars file that also names gpu_capability."""
    entries = []
    for path in sorted(INVENTORIES.glob("*/group_vars/*.yml")):
        data = yaml.safe_load(path.read_text()) or {}
        for index, model in enumerate(data.get("sglang_service_models") or []):
            assert "gpu_capability" in data, f"{path}: models without the group's gpu_capability"
            entries.append(Entry(path.parent.parent.name, path.stem, data["gpu_capability"], index, model))
    return entries
