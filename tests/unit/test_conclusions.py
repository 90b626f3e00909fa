"""A conclusion is data: it round-trips through JSON unchanged and renders from the content files' words."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from core.conclusions import (
    DISTURBED,
    NOT_SHOWN,
    SHOWN,
    Conclusion,
    Finding,
    MachineState,
    conclusion_of,
    disturbed,
    render,
)
from core.words import ContentWords


def test_a_conclusion_round_trips_through_json() -> None:
    found = Conclusion("batch", NOT_SHOWN, Finding("prefill_rose", {"ratio": 3.26}),
                       (Finding("decode_gain", {"gain": 17.1, "n1": 1, "n2": 8}),))
    assert Conclusion.from_dict(json.loads(json.dumps(found.to_dict()))) == found
    assert found.shown is False


def test_an_unknown_status_is_refused_with_its_name() -> None:
    with pytest.raises(ValueError, match="'maybe'"):
        Conclusion("input", "maybe")


def test_render_asks_for_the_status_then_every_finding_with_its_values() -> None:
    asked: list[tuple[str, dict[str, object]]] = []

    def words(key: str, **values: object) -> str:
        asked.append((key, values))
        return key

    found = Conclusion("batch", NOT_SHOWN, Finding("prefill_rose", {"ratio": 3.26}), (Finding("gain", {"g": 2}),))
    assert render(found, words) == ["batch.conclusion.not_shown", "batch.conclusion.prefill_rose",
                                    "batch.conclusion.gain"]
    assert asked[0] == ("batch.conclusion.not_shown", {"ratio": 3.26})


def test_a_machine_state_keeps_only_numbers_it_can_read() -> None:
    state = MachineState.from_dict({"measured": True, "server_share": 0.5, "others_s": "lots", "cores": True})
    assert state == MachineState(measured=True, server_share=0.5)
    assert MachineState.from_dict(state.to_dict()) == state
    assert MachineState.from_dict(None) == MachineState()


def test_a_stored_conclusion_wins_and_an_unreadable_one_is_computed_again() -> None:
    """`conclusion_of`: the conclusion kept with a run (as a `Conclusion` or as `to_dict` wrote it) wins; a table
    without a known status (an old export's) is computed again from the records and the state."""
    computed = Conclusion("batch", SHOWN, Finding("batched", {"gain": 2.0}))

    class Spec:
        def conclude(self, records: object, state: MachineState | None) -> Conclusion:
            return replace(computed, status=DISTURBED) if state and state.busy else computed

    kept = Conclusion("batch", NOT_SHOWN, Finding("prefill_not_flat", {"gain": 3.26}))
    assert conclusion_of(Spec(), [], None, kept) == kept
    assert conclusion_of(Spec(), [], None, kept.to_dict()) == kept
    assert conclusion_of(Spec(), [], None, {"status": "maybe"}) == computed
    assert conclusion_of(Spec(), [], MachineState(busy=True), None).status == DISTURBED


def test_a_value_named_word_is_said_in_the_readers_language() -> None:
    found = Conclusion("cache", SHOWN, Finding("ratio", {"strategy_word": "strategy.timestamp_first", "ratio": 6.1,
                                                         "rounds": 6}))
    assert render(found, ContentWords("en"))[1] == ("timestamp first recomputed 6.1x the tokens append only did, on "
                                                    "the 6 rounds both measured.")
    assert ContentWords("zh")("strategy.timestamp_first") in render(found, ContentWords("zh"))[1]


def test_the_meter_disturbs_only_when_it_called_the_machine_busy_and_makes_up_no_figure() -> None:
    assert disturbed(None) is None and disturbed(MachineState(measured=True, server_share=0.9)) is None
    assert disturbed(MachineState(busy=True)) == Finding("busy_unmeasured")
    assert disturbed(MachineState(True, 0.5, 3.0, 1.0, 2, True)) == Finding("busy", {"share": 50.0, "others": 3.0})
