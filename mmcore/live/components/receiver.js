// What a fed component (livetable.js, livetail.js) does with its element, put before the component's own
// code (mmcore/live/livepage.py, `script` and `bundle`). The element keeps its state under `stateName`
// (`initial` at first); `receive(element, state, message)` applies one message and says whether it
// could (a message that does not follow what the element holds cannot). Messages come with the
// element's data or, on a page section kept current by a feed (mmcore/live/livefeed.py), from the
// feed, which finds the element's receiver by its key. When the element's own data cannot be applied,
// the trigger "lost" is sent, once per message, and the server answers with a draw.
function mountReceiver(component, stateName, initial, receive) {
  const { data, parentElement, setTriggerValue } = component;
  const held = (parentElement[stateName] ??= { ...initial, lost: null });
  const receivers = (window.__minimindReceivers ??= new Map());
  const receiver = (message) => receive(parentElement, held, message);
  receivers.set(data.key, receiver);
  if (!receive(parentElement, held, data) && held.lost !== data.epoch + ":" + data.seq) {
    held.lost = data.epoch + ":" + data.seq;
    setTriggerValue("lost", held.lost);
  }
  return () => {
    if (receivers.get(data.key) === receiver) receivers.delete(data.key);
  };
}
