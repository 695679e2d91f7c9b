"""Log tails open at their end, wrap long lines, and never carry the log's markup into the page."""
from mmcore import tailview


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
