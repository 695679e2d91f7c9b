// A log tail that grows (see mmcore/live/livepage.py, log_tail, and livechart_wire.py). The first
// message draws the box (HTML the server made, its text escaped); later ones drop lines from its top,
// keep the next ones and add lines at its end, as plain text. Messages come with the element's data
// or, on a page section kept current by a feed (mmcore/live/livefeed.py), from the feed, which
// finds the tail by its key. A message that does not follow what the element holds (it was remounted,
// or missed one) is "lost": the element's own data sends the trigger "lost", a feed's message is
// reported by the feed, and the server answers with a draw (receiver.js, put before this file, does
// that part). The box scrolls itself to its end (see mmcore/logs/tailview.py).
function receive(parentElement, tail, data) {
  if (data.epoch === tail.epoch && data.seq <= tail.seq) return true;  // held already (or newer)
  if (data.op === "draw") {
    parentElement.innerHTML = data.html;
    const pre = parentElement.querySelector("pre");
    Object.assign(tail, { epoch: data.epoch, seq: data.seq, lines: data.count ? pre.textContent.split("\n") : [] });
  } else if (data.op === "extend" && data.epoch === tail.epoch && data.after === tail.seq) {
    tail.lines = tail.lines.slice(data.drop, data.drop + data.keep).concat(data.add);
    tail.seq = data.seq;
    parentElement.querySelector("pre").textContent = tail.lines.join("\n");
  } else {
    return false;
  }
  return true;
}

export default function (component) {
  return mountReceiver(component, "__minimindTail", { epoch: null, seq: 0, lines: [] }, receive);
}
