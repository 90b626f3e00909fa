"""Phoenix's spans dataframe saved as Parquet (``df.to_parquet(...)``, or Phoenix's ``TraceDataset.save()``): the
table read with pyarrow and its rows given as ``DataFrame.to_json(orient="records")`` writes them (times in
milliseconds, NaN as null, maps as objects), so the dataframe layout of `spans` reads both: one reader.

A file is told by its magic bytes (``PAR1``), whatever its name. It is bounded like a gzip file: its rows and the
size its columns unpack to (as its footer declares them) are checked before anything is unpacked. A file that is
damaged or holds no span table is refused with a sentence naming it and what is missing.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from core.doctor.model import TranscriptError
from core.doctor.spans import FRAME_ID
from core.words import Sentence

MAGIC = b"PAR1"  # a Parquet file starts and ends with it
MAX_ROWS = 500_000  # ten times the spans a JSON dataframe within the doctor's 50 MB holds (~1 kB a row)


def is_parquet(data: bytes) -> bool:
    return data.startswith(MAGIC)


def _as_json(value: Any) -> Any:
    """A cell as ``DataFrame.to_json`` writes it: a time as milliseconds since the epoch (UTC when it has no zone),
    NaN as null, bytes as text, lists and objects cell by cell, any other value (a date, a decimal) as its text."""
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return moment.timestamp() * 1000
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_as_json(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _as_json(item) for key, item in value.items()}
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def frame_rows(data: bytes, name: str, max_bytes: int) -> list[dict[str, Any]]:
    """The rows of a Parquet spans dataframe, or `TranscriptError` with a sentence saying why not."""
    try:
        table_file = pq.ParquetFile(pa.BufferReader(data))
        footer = table_file.metadata
        unpacked = sum(footer.row_group(n).total_byte_size for n in range(footer.num_row_groups))
        columns = table_file.schema_arrow.names
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise TranscriptError(Sentence("doctor_notes.parquet_damaged", name=name, problem=str(exc))) from None
    if FRAME_ID not in columns:
        shown = ", ".join(columns[:8]) + (", ..." if len(columns) > 8 else "")
        raise TranscriptError(Sentence("doctor_notes.parquet_not_spans", name=name, column=FRAME_ID,
                                       columns=shown or "-"))
    if footer.num_rows == 0:
        raise TranscriptError(Sentence("doctor_notes.parquet_no_rows", name=name))
    if footer.num_rows > MAX_ROWS or unpacked > max_bytes:
        raise TranscriptError(Sentence("doctor_notes.parquet_too_large", name=name, rows=footer.num_rows,
                                       mb=unpacked / 2**20, most_rows=MAX_ROWS, most_mb=max_bytes / 2**20))
    try:
        table = table_file.read()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise TranscriptError(Sentence("doctor_notes.parquet_damaged", name=name, problem=str(exc))) from None
    return [_as_json(row) for row in table.to_pylist(maps_as_pydicts="lossy")]
