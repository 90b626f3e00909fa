"""GGUF files that local runners already keep on this machine: nothing is downloaded.

Looked for, in this order: ``$LLAMA_MODEL``; the Hugging Face hub cache (``$HF_HUB_CACHE``, else
``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``); LM Studio's ``~/.lmstudio/models`` and
``~/.cache/lm-studio/models``; llama.cpp's own cache (``$LLAMA_CACHE``, else ``~/.cache/llama.cpp``).
Split files (``-00002-of-00003.gguf``) are listed by their first part, the one llama-server loads;
multimodal projectors (``mmproj``) are left out since they are not language models.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

_SPLIT = re.compile(r"-(\d+)-of-\d+\.gguf$", re.IGNORECASE)
MAX_FILES = 200


@dataclass(frozen=True)
class FoundModel:
    path: Path
    size_bytes: int
    where: str  # which runner's folder it was found in


def places() -> list[tuple[str, Path]]:
    home = Path.home()
    hf = os.environ.get("HF_HUB_CACHE") or (str(Path(os.environ["HF_HOME"]) / "hub") if os.environ.get("HF_HOME")
                                           else str(home / ".cache" / "huggingface" / "hub"))
    return [("Hugging Face", Path(hf)), ("LM Studio", home / ".lmstudio" / "models"),
            ("LM Studio", home / ".cache" / "lm-studio" / "models"),
            ("llama.cpp", Path(os.environ.get("LLAMA_CACHE") or home / ".cache" / "llama.cpp"))]


def _wanted(path: Path) -> bool:
    name = path.name.lower()
    split = _SPLIT.search(name)
    return name.endswith(".gguf") and "mmproj" not in name and (split is None or int(split.group(1)) == 1)


def find_ggufs() -> list[FoundModel]:
    """Every GGUF in those places (the hub's snapshot links resolved to one entry each), largest last."""
    found: dict[Path, FoundModel] = {}
    explicit = os.environ.get("LLAMA_MODEL")
    if explicit and Path(explicit).is_file():
        path = Path(explicit)
        found[path.resolve()] = FoundModel(path, path.stat().st_size, "LLAMA_MODEL")
    for where, root in places():
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*.gguf")):
            if len(found) >= MAX_FILES:
                break
            try:
                real = path.resolve()
                if _wanted(path) and real.is_file() and real not in found:
                    found[real] = FoundModel(path, real.stat().st_size, where)
            except OSError:
                continue
    return sorted(found.values(), key=lambda f: (f.where != "LLAMA_MODEL", f.size_bytes))
