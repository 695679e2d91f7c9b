// A log tail that grows (see mmcore/live/livepage.py, log_tail, and livechart_wire.py). The first
// message draws the box (HTML the server made, its text escaped); later ones drop lines from its top,
// keep the next ones and add lines at its end, as plain text. Messages come with the element's data
// or, on a page section kept current by a feed (mmcore/live/livefeed.py), from the feed, which
// finds the tail by its key. A message that does not follow what the element holds (it was remounted,
// or missed one) is "lost": the element's own data sends the trigger "lost", a feed's message is
// reported by the feed, and the server answers with a draw. The box scrolls itself to its end (see
// mmcore/logs/tailview.py).
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
  const { data, parentElement, setTriggerValue } = component;
  const tail = (parentElement.__minimindTail ??= { epoch: null, seq: 0, lines: [], lost: null });
  const receivers = (window.__minimindReceivers ??= new Map());
  const receiver = (message) => receive(parentElement, tail, message);
  receivers.set(data.key, receiver);
  if (!receive(parentElement, tail, data) && tail.lost !== data.epoch + ":" + data.seq) {
    tail.lost = data.epoch + ":" + data.seq;  // once per message: the answer is a draw
    setTriggerValue("lost", tail.lost);
  }
  return () => {
    if (receivers.get(data.key) === receiver) receivers.delete(data.key);
  };
}
