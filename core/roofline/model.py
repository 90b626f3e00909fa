"""What one token costs a model: FLOPs, the bytes a decode step reads, KV-cache bytes per token.

Read from the GGUF's tensor list with the ``gguf`` package (from the llama.cpp project), where the
file is at hand: the token-embedding table is a row lookup, so a decode step reads all of it only
when the output head is tied to it (no ``output.weight`` tensor, as in SmolLM2); otherwise one row.
Without the file (a llama-server at a URL) the server's ``/v1/models`` facts are used: its ``size``
then stands for the bytes read, and the KV cache is unknown. For an API the user names the size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

KV_BYTES_PER_ELEMENT = 2  # llama-server's default KV cache type is f16 (-ctk/-ctv f16)
GGUF = "gguf"
SERVER = "server"
USER = "user"


@dataclass(frozen=True)
class ModelFacts:
    """The numbers the roofline needs about one model, and where they came from (``source``)."""

    name: str
    n_params: int  # every weight in the file
    size_bytes: int  # the weights' bytes (the file less its header)
    decode_bytes: int  # weight bytes one decode step reads
    matmul_params: int  # weights multiplied per token: FLOPs ≈ 2 x this (the embedding lookup is not a matmul)
    source: str  # GGUF, SERVER or USER
    n_layers: int | None = None
    n_embd: int | None = None
    n_ctx_train: int | None = None
    ftype: str | None = None
    kv_bytes_per_token: int | None = None  # K and V of every layer, f16
    tied_embeddings: bool | None = None

    def flops_per_token(self, context: float = 0.0) -> float:
        """2 x matmul weights, plus attention: QKᵀ and AV over ``context`` earlier tokens, 4·layers·n_embd each."""
        attention = 4.0 * self.n_layers * self.n_embd * context if self.n_layers and self.n_embd else 0.0
        return 2.0 * self.matmul_params + attention

    def bytes_per_step(self, context: float = 0.0, streams: int = 1) -> float:
        """Bytes one decode step reads: the weights once for all streams, each stream's KV cache so far."""
        kv = (self.kv_bytes_per_token or 0) * context * streams
        return float(self.decode_bytes) + kv

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _field(reader: Any, key: str) -> Any:
    entry = reader.fields.get(key)
    return entry.contents() if entry is not None else None


def from_gguf(path: Path) -> ModelFacts:
    """Facts from the file's tensor list and metadata (reads the header only: the tensors are memory-mapped)."""
    from gguf import GGUFReader  # the local engine's requirement; not needed by a hosted deploy

    reader = GGUFReader(str(path))
    tensors = {t.name: t for t in reader.tensors}
    arch = _field(reader, "general.architecture") or "llama"
    n_params = sum(int(t.n_elements) for t in reader.tensors)
    size = sum(int(t.n_bytes) for t in reader.tensors)
    embedding = tensors.get("token_embd.weight")
    tied = embedding is not None and "output.weight" not in tensors
    embd_bytes = int(embedding.n_bytes) if embedding is not None else 0
    embd_elems = int(embedding.n_elements) if embedding is not None else 0
    rows = int(embedding.shape[-1]) if embedding is not None and len(embedding.shape) > 1 else 1
    # untied: the lookup reads one row; tied: the head reads the whole table (and multiplies by it)
    decode_bytes = size if tied else size - embd_bytes + embd_bytes // max(rows, 1)
    matmul = n_params if tied else n_params - embd_elems
    layers, embd = _field(reader, f"{arch}.block_count"), _field(reader, f"{arch}.embedding_length")
    heads, kv_heads = _field(reader, f"{arch}.attention.head_count"), _field(reader, f"{arch}.attention.head_count_kv")
    key_len = _field(reader, f"{arch}.attention.key_length")
    value_len = _field(reader, f"{arch}.attention.value_length")
    kv = None
    if layers and embd and heads:
        head_dim = int(embd) // int(heads)
        per_layer = int(kv_heads or heads) * (int(key_len or head_dim) + int(value_len or head_dim))
        kv = int(layers) * per_layer * KV_BYTES_PER_ELEMENT
    file_type = _field(reader, "general.file_type")
    return ModelFacts(name=str(_field(reader, "general.name") or path.stem), n_params=n_params, size_bytes=size,
                      decode_bytes=decode_bytes, matmul_params=matmul, source=GGUF,
                      n_layers=int(layers) if layers else None, n_embd=int(embd) if embd else None,
                      n_ctx_train=_int(_field(reader, f"{arch}.context_length")),
                      ftype=_ftype(file_type), kv_bytes_per_token=kv, tied_embeddings=tied)


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def _ftype(code: Any) -> str | None:
    if not isinstance(code, int):
        return None
    try:
        from gguf import LlamaFileType
        return LlamaFileType(code).name.removeprefix("MOSTLY_")
    except (ImportError, ValueError):
        return str(code)


def from_server(models: dict[str, Any]) -> ModelFacts | None:
    """Facts from llama-server's ``/v1/models`` answer (its ``meta``); None when it has none."""
    entries = models.get("data") or []
    meta = entries[0].get("meta") if entries and isinstance(entries[0], dict) else None
    if not isinstance(meta, dict) or not meta.get("n_params") or not meta.get("size"):
        return None
    params, size = int(meta["n_params"]), int(meta["size"])
    return ModelFacts(name=str(entries[0].get("id", "")), n_params=params, size_bytes=size, decode_bytes=size,
                      matmul_params=params, source=SERVER, n_embd=_int(meta.get("n_embd")),
                      n_ctx_train=_int(meta.get("n_ctx_train")),
                      ftype=str(meta["ftype"]) if meta.get("ftype") is not None else None)


def from_user(name: str, billions: float, bytes_per_weight: float) -> ModelFacts:
    """An API's model, sized by the user: ``billions`` of weights at ``bytes_per_weight`` (2 for BF16)."""
    params = int(billions * 1e9)
    size = int(params * bytes_per_weight)
    return ModelFacts(name=name, n_params=params, size_bytes=size, decode_bytes=size, matmul_params=params,
                      source=USER)
