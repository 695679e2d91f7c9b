// A log tail that grows (see mmcore/widgets/livepage.py, log_tail, and livechart_wire.py). The first
// message draws the box (HTML the server made, its text escaped); later ones drop lines from its top,
// keep the next ones and add lines at its end, as plain text. A message that does not follow what the
// element holds (it was remounted, or missed one) sends the trigger "lost", and the server answers
// with a draw. The box scrolls itself to its end (see mmcore/logs/tailview.py).
export default function (component) {
  const { data, parentElement, setTriggerValue } = component;
  const tail = (parentElement.__minimindTail ??= { epoch: null, seq: 0, lines: [], lost: null });
  if (data.epoch === tail.epoch && data.seq === tail.seq) return;  // held already
  if (data.op === "draw") {
    parentElement.innerHTML = data.html;
    const pre = parentElement.querySelector("pre");
    Object.assign(tail, { epoch: data.epoch, seq: data.seq, lines: data.count ? pre.textContent.split("\n") : [] });
  } else if (data.op === "extend" && data.epoch === tail.epoch && data.after === tail.seq) {
    tail.lines = tail.lines.slice(data.drop, data.drop + data.keep).concat(data.add);
    tail.seq = data.seq;
    parentElement.querySelector("pre").textContent = tail.lines.join("\n");
  } else if (tail.lost !== data.epoch + ":" + data.seq) {
    tail.lost = data.epoch + ":" + data.seq;  // once per message: the answer is a draw
    setTriggerValue("lost", tail.lost);
  }
}
