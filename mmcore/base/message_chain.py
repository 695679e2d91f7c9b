"""The rule by which a live element in the browser follows its messages (charts, log tails, the Jobs
table; see `mmcore.live.livefeed`), for the tests and benches that replay what a browser holds.

Each message carries its chain (`epoch`, new at each "draw") and its number (`seq`); a change also
carries the number it follows (`after`). An element keeps what it holds for a message of its chain that
it holds already or that is older (an element's own data can arrive after its feed's newer messages);
a "draw" replaces what it holds; a change applies only on top of the message it follows. Anything else
cannot be followed: the element asks for a draw. The components' scripts (`components/*.js`) follow the
same rule.
"""


def follow(held, data, draw, change):
    """What an element holding `held` ({"epoch", "seq", ...}, or None) holds after message `data`, or None
    when it cannot follow it. `draw(data)` -> the held fields a draw gives; `change(held, data)` -> the
    fields a change gives, or None when it does not fit what is held."""
    if held is not None and held["epoch"] == data["epoch"] and data["seq"] <= held["seq"]:
        return held  # the same message again, or an older one
    if data["op"] == "draw":
        return {**draw(data), "epoch": data["epoch"], "seq": data["seq"]}
    if held is None or held["epoch"] != data["epoch"] or data["op"] == "same" or held["seq"] != data.get("after"):
        return None
    changed = change(held, data)
    return None if changed is None else {**held, **changed, "seq": data["seq"]}
