"""The doctor's fix on the command line: ``--write-fixed OUT`` and ``--prove-fix``.

``--write-fixed`` writes the log with its mechanically fixable causes fixed (`core.doctor.fix`), in the
input's format. ``--prove-fix`` replays the original and the fixed rounds on a llama-server (the
embedded one unless ``--backend`` names another) and prints the tokens it recomputed per round, before
and after; ``--json`` then holds them under ``"fix"``.
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path
from typing import Any

from core.doctor import fix
from core.doctor.inputs import GZIP_MAGIC, load_inputs, looks_like_log, read_path
from core.doctor.model import Transcript, TranscriptError
from core.records import RoundResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prove-fix", action="store_true",
                        help="fix what can be fixed mechanically (timestamp or id at the start, tool order, JSON key "
                             "order) and replay the log before and after on a llama-server (the embedded one unless "
                             "--backend says otherwise): tokens recomputed per round")
    parser.add_argument("--write-fixed", type=Path, metavar="OUT",
                        help="write the fixed log to OUT, in the input's format")


def wanted(args: argparse.Namespace) -> bool:
    return bool(args.prove_fix or args.write_fixed)


def read_and_fix(args: argparse.Namespace) -> tuple[list[tuple[str, Transcript]], fix.FixedLog]:
    """The one log named, read once (a FIFO works), as the doctor reads it, and fixed (OUT written)."""
    if len(args.files) != 1:
        raise TranscriptError("--prove-fix and --write-fixed take one JSON or JSONL log.")
    path = args.files[0]
    name, data = read_path(path)
    if not looks_like_log(data):
        raise TranscriptError(f"{path}: --prove-fix and --write-fixed take a JSON or JSONL log of request bodies.")
    transcript = load_inputs([(name, data)], fmt=args.log_format)
    if data.startswith(GZIP_MAGIC):
        data = gzip.decompress(data)  # the fixed log is written uncompressed
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TranscriptError(f"{path} is not UTF-8 (byte {exc.start}): only a UTF-8 log can be fixed.") from None
    fixed = fix.fix_log(name, text, args.log_format, transcript)
    if args.write_fixed:
        args.write_fixed.write_text(fixed.text, encoding="utf-8")
    return [(str(path), transcript)], fixed


def prove(source: tuple[str, Transcript], fixed: fix.FixedLog, backend: Any, fmt: str | None) -> list[RoundResult]:
    name, original = source
    return list(fix.prove(original, fix.fixed_transcript(Path(name).name, fixed, fmt), backend))


def print_fix(fixed: fix.FixedLog, proof: list[RoundResult], out: Path | None) -> None:
    if not fixed.fixed:
        found = f" (found: {', '.join(fixed.left)})" if fixed.left else ""
        print(f"fix: nothing the doctor can fix mechanically{found}; the log is left as it is.")
    for change in fixed.changes:
        print(f"fix: {change}")
    if fixed.left and fixed.fixed:
        print(f"fix: left as they are (they need a decision): {', '.join(fixed.left)}")
    after = fixed.after.first_break if fixed.after else None
    if fixed.fixed:
        print("fix: the fixed log breaks the cache in round "
              f"{after.round} ({after.cause})." if after else "fix: the fixed log has no cache break.")
    if out:
        print(f"fix: the fixed log is in {out}")
    table = fix.proof_table(proof)
    if not table:
        return
    print(f"{'round':>5} {'before: recomputed/prompt':>26} {'after: recomputed/prompt':>25}")
    for row in table:
        print(f"{row.round:>5} {_pair(row.before_recomputed, row.before_prompt):>26} "
              f"{_pair(row.after_recomputed, row.after_prompt):>25}")
    for failed in (r for r in proof if r.error):
        print(f"fix: replay {failed.strategy} round {failed.round} failed: {failed.error}")
    later = [r for r in table[1:] if r.before_recomputed is not None and r.after_recomputed is not None]
    if later:
        before = sum(r.before_recomputed or 0 for r in later)
        after_sum = sum(r.after_recomputed or 0 for r in later)
        print(f"Proven on the server: rounds 2-{later[-1].round} recomputed {before:,} tokens as logged and "
              f"{after_sum:,} fixed ({before - after_sum:,} fewer).")


def _pair(recomputed: int | None, prompt: int | None) -> str:
    return "-" if recomputed is None else f"{recomputed:,}/{prompt:,}" if prompt is not None else f"{recomputed:,}"


def record(fixed: fix.FixedLog, proof: list[RoundResult]) -> dict[str, Any]:
    after = fixed.after.first_break if fixed.after else None
    return {**fixed.to_dict(), "fixed_first_break": after.round if after else None,
            "proof": [row.to_dict() for row in fix.proof_table(proof)]}
