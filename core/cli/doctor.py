"""Find what breaks the prefix cache in an agent's logged requests (the cache doctor).

``python -m core doctor FILE...``: each JSON/JSONL log is read line by line in whatever format it
holds (Chat Completions, OpenAI Responses, Anthropic Messages, Gemini, or a request/response
wrapper such as ``python -m core capture`` writes); several plain text files are one prompt per
round; a trace exported by an observability tool (OTLP, the OpenTelemetry SDK's span JSON, Langfuse,
LangSmith: the ``files`` help lists every layout) is read one round per LLM call. Without ``--backend``
the analysis is static (a stable serialization, token estimates);
with a llama-server it uses its chat template and exact counts, and ``--replay`` measures.
``--fail-on-break`` exits 1 when a round breaks the cache for a cause not listed with ``--allow``, and
when a line could not be read (it may be the very round that breaks the cache: an agent killed
mid-write leaves exactly that) unless ``--allow-unread`` is given. Each file is read once, bounded
(a FIFO and ``doctor <(zcat log.gz)`` work; gzip is read as gzip). What is compared for each input is
`core.doctor.decision`'s call, the page's too. ``--write-fixed`` and ``--prove-fix``: see
`core.cli.doctor_fix`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from core import doctor
from core.backends import BACKENDS
from core.backends.connect import open_connection
from core.cli import doctor_fix
from core.cli.target import add_target_arguments, apply_deadline, target_from_args
from core.engine.server import EngineError

Result = tuple[str, doctor.Transcript, doctor.Analysis, list[Any]]  # a file's name, what was read, found, replayed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=Path, help=f"what to read: {doctor.READ_FORMATS}")
    servers = [name for name, spec in BACKENDS.items() if spec.is_llama_server]
    add_target_arguments(parser, servers, None, context=False)
    parser.add_argument("--replay", action="store_true", help="also send the rounds and report what was recomputed")
    parser.add_argument("--provider", choices=sorted(doctor.BILLING_RULES),
                        help="bill with this provider's rule (default: the one each log's format or usage points to)")
    parser.add_argument("--format", choices=doctor.FORMATS, dest="log_format",
                        help="read every line of each log in this format (default: decided for the whole log from "
                             "all its lines and any endpoint URL)")
    parser.add_argument("--json", type=Path, help="write one record per round as JSON")
    parser.add_argument("--fail-on-break", action="store_true",
                        help="exit 1 when a round breaks the cache for a cause not listed with --allow (a CI gate)")
    parser.add_argument("--allow", action="append", default=[], choices=doctor.CAUSES, metavar="CAUSE",
                        help=f"a cause you accept (repeatable): {', '.join(doctor.CAUSES)}")
    parser.add_argument("--allow-unread", action="store_true",
                        help="with --fail-on-break: do not fail on lines that could not be read (still listed)")
    doctor_fix.add_arguments(parser)


def _inputs(files: list[Path], fmt: str | None = None) -> list[tuple[str, doctor.Transcript]]:
    """Each JSON/JSONL log on its own; plain text files together, one round each. Each file is read once."""
    read, left = [], doctor.MAX_DOCTOR_BYTES
    for path in files:
        name, data = doctor.read_path(path, left)
        read.append((path, name, data))
        left -= len(data)
    out = [(str(path), doctor.load_inputs([(name, data)], fmt=fmt))
           for path, name, data in read if doctor.looks_like_log(data)]
    texts = [(path, name, data) for path, name, data in read if not doctor.looks_like_log(data)]
    if texts:
        out.append((", ".join(str(path) for path, _, _ in texts), doctor.load_inputs([(n, d) for _, n, d in texts])))
    return out


def _print_findings(analysis: doctor.Analysis, replayed: list[Any]) -> None:
    measured = any(f.measured_cached_tokens is not None for f in analysis.findings)
    print(f"{'round':>5} {'breaks':>6} {'cause':>22} {'msg':>4} {'field':>10} {'diff@':>7} {'prefix':>7} "
          f"{'prompt':>7} {'recomp':>7} {'append':>7}" + ("  cached: measured/simulated" if measured else "")
          + ("  replay: recomputed/reused" if replayed else ""))
    for index, f in enumerate(analysis.findings):
        line = (f"{f.round:>5} {'YES' if f.breaks_cache else '-':>6} {f.cause:>22} "
                f"{f.message_index if f.message_index is not None else '-':>4} {f.field or '-':>10} "
                f"{f.first_diff_char if f.first_diff_char is not None else '-':>7} {f.common_prefix_tokens:>7} "
                f"{f.prompt_tokens:>7} {f.recomputed_tokens:>7} {f.append_only_recomputed_tokens:>7}")
        if f.measured_cached_tokens is not None:
            line += f"  {f.measured_cached_tokens}/{f.predicted_cached_tokens} ({f.provider}: {f.verdict})"
        if index < len(replayed):
            row = replayed[index]
            line += f"  {row.recomputed_tokens}/{row.cached_tokens}" + (f" ERROR {row.error}" if row.error else "")
        print(line)


def _round(analysis: doctor.Analysis, finding: doctor.RoundFinding) -> str:
    """``round N``, with the line it was read from where that is another number (a line before it was not read)."""
    source = analysis.rounds[finding.round - 1].source if finding.round <= len(analysis.rounds) else ""
    number = source.rsplit(" ", 1)[-1]
    shown = number.isdigit() and int(number) != finding.round and " line " in source
    return f"round {finding.round} ({source})" if shown else f"round {finding.round}"


def _print_summary(analysis: doctor.Analysis, transcript: doctor.Transcript, provider: str | None) -> None:
    first = analysis.first_break
    if first:
        char = first.field_char if first.field_char is not None else first.first_diff_char
        change = f": {first.parameter} {first.old_value} -> {first.new_value}" if first.parameter else ""
        print(f"The cache first breaks in {_round(analysis, first)}: {first.cause} in {doctor.where(first)} "
              f"({first.field}) at character {char} of it{change}.")
    elif any(f.cause == doctor.SERVER_HISTORY for f in analysis.findings):
        print("No break found in what the bodies hold, but the history they continue (previous_response_id) lives "
              "on the server and cannot be checked.")
    elif transcript.errors:
        lines = f"{len(transcript.errors)} lines" if len(transcript.errors) != 1 else "1 line"
        print(f"No break among the {len(analysis.findings)} rounds read; {lines} could not be read and "
              f"{'was' if lines == '1 line' else 'were'} not checked.")
    else:
        print(_no_break(analysis))
    for f in analysis.findings:
        _print_cost(f, analysis)
    totals = analysis.totals()
    unseen = sum(1 for f in analysis.findings if f.not_compared)
    print(f"Recomputed in all: {totals['recomputed']:,} tokens; an append-only version: {totals['append_only']:,}"
          + (f" ({unseen} rounds not compared are left out)." if unseen else "."))
    name = provider or Counter(f.provider for f in analysis.findings).most_common(1)[0][0]
    rule = doctor.BILLING_RULES[name]
    rows = doctor.billing(analysis, rule)
    cost, ideal = sum(r["cost"] for r in rows), sum(r["append_only_cost"] for r in rows)
    print(f"{name} ({rule.source}, checked {rule.checked}): {sum(r['cached_tokens'] for r in rows):,} tokens billed "
          f"as cached, ${cost:.6f} input cost vs ${ideal:.6f} append-only.")
    for item in doctor.audit(analysis):
        if item.issues:
            print(f"breakpoint audit: round {item.round}, {item.where} ({item.tokens:,} tokens, "
                  f"ttl {item.ttl or '-'}): {', '.join(item.issues)}")
    _print_provider_view(analysis)


CONTINUATION = {doctor.NEW_CONVERSATION: "start another conversation (each keeps its own cache; only what they "
                                          "share at the start can be read from the cache)",
                doctor.FORMAT_CHANGED: "switch to another API format (two formats never share a cache)",
                doctor.NOT_COMPARED: "were not compared (the input does not hold their whole prompt)",
                doctor.EARLIER: "extend an earlier round, not the one just before (another agent's request, or a "
                                "round not held whole, came between)",
                doctor.LAST_MESSAGE_REPLACED: "rebuild the last message of the same conversation (a step that "
                                              "rewrites it; only that message is recomputed)",
                doctor.END_OF_PROMPT: "replace or edit the last message of the round before, at its end (only that "
                                      "message is recomputed)"}


def _no_break(analysis: doctor.Analysis) -> str:
    """No round breaks the cache: said as it is, never "every round extends the previous one" when some
    rounds started another conversation, switched format or could not be compared."""
    counts = analysis.continuations()
    others = {cause: n for cause, n in counts.items() if cause != doctor.NONE}
    if not others:
        return "No round breaks the cache: every round extends the previous one."
    parts = [f"{counts[doctor.NONE]} extend the one before"] if counts.get(doctor.NONE) else []
    parts += [f"{n} {CONTINUATION.get(cause, cause)}" for cause, n in sorted(others.items())]
    if set(counts) == {doctor.NOT_COMPARED}:  # nothing was compared: no claim about breaks either way
        return f"No round could be compared. From round 2: {'; '.join(parts)}."
    return f"No round breaks the cache within a conversation. From round 2: {'; '.join(parts)}."


def _print_cost(f: doctor.RoundFinding, analysis: doctor.Analysis) -> None:
    """What a varying value early in the prompt, or a compaction, cost in this round."""
    if f.cause == doctor.VARYING_PREFIX and f.breaks_cache:
        print(f"round {f.round}: another conversation from the same prompt as round {f.compared_with}, but the value "
              f"{f.old_value!r} became {f.new_value!r} in {doctor.where(f)}: "
              f"{f.shareable_tokens:,} tokens after it that both share are recomputed with everything else "
              f"({f.recomputed_tokens:,} in all). Move the value after the fixed part (into the first user message).")
    if f.cause == doctor.HISTORY_COMPACTED:
        print(f"round {f.round}: the history was compacted (a summary replaces it, on purpose): {f.lost_tokens:,} "
              f"tokens of round {f.compared_with} are no longer read from the cache and {f.recomputed_tokens:,} are "
              "recomputed.")
    if f.not_compared:
        print(f"round {f.round}: not compared: {f.not_compared}")


UNEXPLAINED = {doctor.GAP_OVER_LIFETIME: "the time since the previous round exceeds the cache's lifetime",
               doctor.BELOW_MINIMUM: "the prompt is below the provider's minimum for this model",
               doctor.ROUTING_CHANGED: "a different prompt_cache_key or user routed it to another machine",
               doctor.NOT_PROMISED: "nothing in the payload explains it: the provider promises no hit (eviction, load)"}


def _print_provider_view(analysis: doctor.Analysis) -> None:
    """The provider's own verdict beside the doctor's, and what the payload cannot show."""
    for f in analysis.findings:
        if f.verdict == doctor.UNSEEN_TOKENS:
            print(f"round {f.round}: {f.provider} counted {f.measured_prompt_tokens:,} prompt tokens, "
                  f"{f.unseen_tokens:,} more than the body shows (web search results, images or files counted "
                  "server-side): its cached tokens are not compared with the prediction")
        if f.verdict == doctor.BEFORE_LOG:
            print(f"round {f.round}: {f.provider} read {f.measured_cached_tokens:,} cached tokens written by "
                  "requests before this log")
        if f.unexplained:
            gap = f" ({f.gap_seconds:,.0f} s after the previous round; lifetime {f.lifetime_seconds} s)" \
                if f.gap_seconds is not None and f.lifetime_seconds is not None else ""
            side = (f" On {f.provider}'s side, not in the prompt: it kept its first {f.common_prefix_tokens:,} tokens "
                    f"from round {f.compared_with} and met the {f.minimum_tokens or 0:,}-token minimum; nothing in "
                    "the prompt to change.") if f.provider_side else ""
            print(f"round {f.round}: the prefix was intact, yet {f.provider} read {f.measured_cached_tokens:,} of "
                  f"{f.predicted_cached_tokens:,} predicted{gap}. What could explain it: "
                  + "; ".join(UNEXPLAINED[r] for r in f.unexplained) + "." + side)
        if f.provider_reason is not None:
            missed = f", {f.provider_missed_tokens:,} tokens missed" if f.provider_missed_tokens is not None else ""
            doctor_says = f.cause if f.breaks_cache else "no break"
            match = {True: "they agree", False: "THEY DISAGREE", None: "nothing to compare"}[f.diagnosis_agrees]
            print(f"round {f.round}: the provider's diagnostics say {f.provider_reason} ({f.provider_section}"
                  f"{missed}); the doctor says {doctor_says}: {match}")


def _record(analysis: doctor.Analysis, transcript: doctor.Transcript, replayed: list[Any]) -> dict[str, Any]:
    records = []
    for index, f in enumerate(analysis.findings):
        record = f.to_dict()
        record.pop("old_snippet"), record.pop("new_snippet")
        if index < len(replayed):
            record["replay"] = replayed[index].to_dict()
        records.append(record)
    return {"format": analysis.formats, "mixed": transcript.mixed, "rendering": analysis.rendering,
            "errors": analysis.errors, "not_used": transcript.unused,
            "notes": analysis.notes, "audit": [item.to_dict() for item in doctor.audit(analysis)], "rounds": records}


def _print_results(results: Sequence[Result], provider: str | None) -> None:
    for name, transcript, analysis, replayed in results:
        print(f"{name}: {', '.join(analysis.formats)}; {len(analysis.findings)} rounds read, rendered with the "
              f"{analysis.rendering}; tokens {'exact' if analysis.counter.exact else 'estimated'}.")
        for note in analysis.notes:  # the input's, and the chat template check's
            print(f"note: {note}")
        if transcript.mixed:
            print(f"note: {transcript.mixed}; a change of format between rounds is reported as a mix "
                  "(format_changed), never as a cache break. Use --format to read every line in one format.")
        _print_findings(analysis, replayed)
        _print_summary(analysis, transcript, provider)


def _failed(args: argparse.Namespace, results: Sequence[Result],
            inputs: Sequence[tuple[str, doctor.Transcript]]) -> bool:
    """--fail-on-break: a round that breaks the cache (unless allowed), or a line that could not be read."""
    failed = False
    defects = [(name, f, a) for name, _, a, _ in results for f in a.findings
               if f.breaks_cache and f.cause not in args.allow]
    if defects:
        name, f, analysis = defects[0]
        print(f"FAIL: {len(defects)} round(s) break the prompt cache; first: {name} {_round(analysis, f)}: {f.cause} "
              f"in {doctor.where(f)} ({f.field})")
        failed = True
    unread = [error for _, transcript in inputs for error in transcript.errors]
    if unread and not args.allow_unread:
        print(f"FAIL: {len(unread)} line(s) could not be read and were not checked (one may be the round that "
              f"breaks the cache); first: {unread[0]}. Fix the log, or accept them with --allow-unread.")
        failed = True
    return failed


def run(args: argparse.Namespace) -> int:
    """Exit 0 when analysed, 1 with --fail-on-break and a defect, 2 when input or backend cannot be used."""
    fixed = None
    try:
        if doctor_fix.wanted(args):  # one log, read once, and fixed
            inputs, fixed = doctor_fix.read_and_fix(args)
        else:
            inputs = _inputs(args.files, args.log_format)
    except (OSError, doctor.TranscriptError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for _, transcript in inputs:
        for error in transcript.errors:
            print(f"not read: {error}", file=sys.stderr)
        for problem in transcript.unused:  # the round was read; one of its figures is left out
            print(f"not used: {problem}", file=sys.stderr)
    decisions = [doctor.comparison(transcript, name) for name, transcript in inputs]
    refused = [d for d in decisions if d.kind in (doctor.UNREAD, doctor.SINGLE_ROUND)]
    if args.fail_on_break:  # a simulated comparison is a lesson, not rounds of the user's to gate
        refused += [d for d in decisions if d.kind == doctor.SIMULATE]
    if refused:
        for decision in refused:
            print(f"error: {decision.message}", file=sys.stderr)
        return 2
    results: list[Result] = []
    proof = []
    with ExitStack() as stack:
        server = args.backend is not None or args.prove_fix  # the proof needs one: the embedded unless named
        try:
            conn = None if not server else apply_deadline(
                stack.enter_context(open_connection(target_from_args(args, stack))), args)
        except (EngineError, httpx.HTTPError, ValueError) as exc:
            print(f"error: cannot use the backend: {exc}", file=sys.stderr)
            return 2
        for decision in decisions:
            name = decision.name
            for label, transcript in decision.transcripts.items():
                analysis = doctor.analyse(transcript, conn.counter if conn else None, conn.backend if conn else None)
                replayed = list(doctor.replay(transcript, conn.backend)) if args.replay and conn else []
                if decision.kind == doctor.SIMULATE:  # experiment 3's rounds around the prompt, one per strategy
                    label_name = f"{name} (simulated: {label})"
                    transcript.notes.insert(0, f"{name} is a single text file, read as a system prompt; these are "
                                               f"the rounds experiment 3 would send with {label}")
                else:
                    label_name = name
                results.append((label_name, transcript, analysis, replayed))
        if args.prove_fix and conn and fixed and fixed.fixed:
            proof = doctor_fix.prove(inputs[0], fixed, conn.backend, args.log_format)
    _print_results(results, args.provider)
    if fixed:
        doctor_fix.print_fix(fixed, proof, args.write_fixed)
    if args.json:
        records = [{"file": name, **_record(a, t, r)} for name, t, a, r in results]
        if fixed:
            records[0]["fix"] = doctor_fix.record(fixed, proof)
        args.json.write_text(json.dumps(records[0] if len(records) == 1 else {"files": records}, indent=2))
    return 1 if args.fail_on_break and _failed(args, results, inputs) else 0
