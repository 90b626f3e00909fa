"""The doctor's fix on the command line: ``--write-fixed OUT`` and ``--prove-fix``.

``--write-fixed`` writes the log with its mechanically fixable causes fixed (`core.doctor.fix`), in the
input's format. ``--prove-fix`` replays the original and the fixed rounds on a llama-server (the
embedded one unless ``--backend`` names another) and prints the tokens it recomputed per round, before
and after; ``--json`` then holds them under ``"fix"``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from core.doctor import fix
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


def fix_input(args: argparse.Namespace, inputs: list[tuple[str, Transcript]]) -> fix.FixedLog | None:
    """The fixed log (and OUT written), or None after saying on stderr why it cannot be fixed."""
    logs = [p for p in args.files if p.read_bytes()[:4096].lstrip()[:1] in (b"{", b"[")]
    if len(args.files) != 1 or len(logs) != 1 or len(inputs) != 1:
        print("error: --prove-fix and --write-fixed take one JSON or JSONL log.", file=sys.stderr)
        return None
    path = logs[0]
    try:
        fixed = fix.fix_log(path.name, path.read_text(encoding="utf-8"))
    except (TranscriptError, UnicodeDecodeError, OSError) as exc:
        print(f"error: cannot fix {path}: {exc}", file=sys.stderr)
        return None
    if args.write_fixed:
        args.write_fixed.write_text(fixed.text, encoding="utf-8")
    return fixed


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
