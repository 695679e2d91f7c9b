"""The Logs page's view in its URL: every field survives a round trip, bad values are named and
ignored, and the URL wins only when it changed since the page last wrote it."""
from mmcore.logs import urlstate


def test_round_trip_of_a_whole_view():
    state = {"logs.jobs": [12, 13], "logs.files": ["upstream.log"], "logs.metrics": ["loss", "Actor Loss"],
             "logs.smoothing": 0.85, "logs.x_axis": "samples", "logs.log_metrics": ["loss"],
             "logs.x_from": 100, "logs.tail_lines": 1000}
    params = urlstate.encode(state)
    assert params == {"job": "12,13", "file": "upstream.log", "m": "loss,Actor Loss", "smooth": "0.85",
                      "x": "samples", "log": "loss", "from": "100", "tail": "1000"}
    values, problems = urlstate.decode(params)
    assert problems == [] and values == state


def test_defaults_stay_out_of_the_url():
    assert urlstate.encode({"logs.jobs": [5], "logs.x_axis": "step", "logs.tail_lines": 200, "logs.smoothing": "auto",
                            "logs.x_from": None, "logs.log_metrics": []}) == {"job": "5"}


def test_bad_values_are_named_and_ignored():
    values, problems = urlstate.decode({"job": "12,abc", "smooth": "3", "x": "parsecs", "to": "-5",
                                        "m": "loss"})
    assert values == {"logs.metrics": ["loss"]}
    assert len(problems) == 4 and any("job='12,abc'" in p for p in problems)
    assert any("smooth='3'" in p and "0 to 0.99" in p for p in problems)
    assert urlstate.decode({"smooth": "0.86"})[0] == {"logs.smoothing": 0.85}  # the nearest stop of the slider


def test_link_applies_once_then_widgets_write_the_url():
    state, query = {}, {"job": "7", "m": "loss"}
    assert urlstate.apply("logs", state, query) == []
    assert state["logs.jobs"] == [7] and state["logs.metrics"] == ["loss"]
    state["logs.metrics"] = ["loss", "lr"]  # the viewer changes a widget
    assert urlstate.apply("logs", state, query) == []  # the URL has not changed: the widget's value stays
    assert state["logs.metrics"] == ["loss", "lr"]
    urlstate.publish("logs", state, query)
    assert query == {"job": "7", "m": "loss,lr"}
    urlstate.apply("logs", state, query)  # the URL is what the page wrote: widgets keep their values
    assert state["logs.metrics"] == ["loss", "lr"]
    query.clear()
    query.update({"job": "7"})  # browser back to the first link
    urlstate.apply("logs", state, query)
    assert "logs.metrics" not in state  # back to the page's default choice


def test_other_parameters_are_kept():
    query = {"lang": "zh", "job": "1"}
    urlstate.publish("logs", {"logs.jobs": [2]}, query)
    assert query == {"lang": "zh", "job": "2"}
