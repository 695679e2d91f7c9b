"""Log tails open at their end, wrap long lines, and never carry the log's markup into the page."""
from mmcore.logs import tailview


def test_tail_opens_at_its_end_and_wraps():
    box = tailview.tail_html(["step 1", "x" * 500, "finished"])
    assert "flex-direction:column-reverse" in box  # the browser anchors the scroll at the bottom
    assert "white-space:pre-wrap" in box and "overflow-wrap:anywhere" in box  # long lines wrap
    assert box.index("step 1") < box.index("finished")  # still in reading order
    assert "x" * 500 in box


def test_tail_escapes_markup_and_says_when_empty():
    box = tailview.tail_html(["<script>alert(1)</script> & done"])
    assert "<script>" not in box and "&lt;script&gt;" in box and "&amp; done" in box
    assert "(empty)" in tailview.tail_html([])


def test_a_command_is_shown_whole_wrapped_and_escaped():
    box = tailview.command_html("python train_pretrain.py --data_path '<a b>.jsonl' --epochs 1 && echo " + "y" * 300)
    assert "max-height" not in box and "column-reverse" not in box  # all of it, in reading order
    assert "white-space:pre-wrap" in box and "overflow-wrap:anywhere" in box
    assert "&lt;a b&gt;.jsonl" in box and "&amp;&amp; echo" in box and "<a b>" not in box
    assert "y" * 300 in box
