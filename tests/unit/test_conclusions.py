"""A conclusion is data: it round-trips through JSON unchanged and renders from the content files' words."""

from __future__ import annotations

import json

import pytest

from core.conclusions import NOT_SHOWN, Conclusion, Finding, MachineState, render


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
