// A line of text that a feed keeps current (see mmcore/live/livefeed.py): HTML the server made, its
// text escaped. Each message is numbered; an older one (the element's data after a feed's message)
// changes nothing.
export default function (component) {
  const { data, parentElement } = component;
  const text = (parentElement.__minimindText ??= { n: -1 });
  const receivers = (window.__minimindReceivers ??= new Map());
  const receiver = (message) => {
    if (message.n > text.n) {
      text.n = message.n;
      parentElement.innerHTML = '<div class="minimind-livetext">' + message.html + "</div>";
    }
    return true;
  };
  receivers.set(data.key, receiver);
  receiver(data);
  return () => {
    if (receivers.get(data.key) === receiver) receivers.delete(data.key);
  };
}
