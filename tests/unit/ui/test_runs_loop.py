"""The live loop's redraw rule (`ui.runs.redraw_due`): a round is drawn at once unless the last redraw cost
more than the time since it, so the app never spends more on drawing than the rounds it draws took."""

from ui.runs.loop import redraw_due


def test_a_round_longer_than_the_last_redraw_is_drawn_at_once() -> None:
    assert redraw_due(since_last_s=1.2, last_cost_s=0.3)
    assert redraw_due(since_last_s=0.0, last_cost_s=0.0)  # nothing drawn yet: the first round is drawn


def test_a_round_shorter_than_the_last_redraw_waits_for_the_next() -> None:
    assert not redraw_due(since_last_s=0.2, last_cost_s=0.5)
    assert redraw_due(since_last_s=0.2 + 0.4, last_cost_s=0.5)  # the round after it pays for the redraw
