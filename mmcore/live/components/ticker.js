// The live pages' ticker (see mmcore/live/livepage.py). While the tab is visible it fetches the server's
// published change marker (a static file) every `interval_s` and reruns the fragment holding it only
// when something this tab shows has changed; it also keeps the "updated N s ago" line current. A hidden
// tab fetches nothing. The line is drawn from the snapshot the page was drawn from until a newer
// marker is fetched. Without a marker (none published, unreachable, or not advancing) it falls back to
// rerunning the fragment at every tick, which asks the server's watch directly.
//
// Scope "page" (the sidebar's ticker) follows everything and its fragment reruns the app; scope
// "fragment" (a ticker inside a page's own fragment) follows only grown logs and files, and reruns
// just that fragment: without a marker it does so every `progress_s`.
//
// Streamlit calls this function again with each new `data` and keeps the element: one timer lives on
// the element, and each call only hands it the new data. The cleanup of an older call (which may come
// after a newer call) stops nothing.
const STALE_MS = 10000;  // a marker whose checked_at has not moved for this long is not trusted
const RESEND_MS = 10000;  // a trigger for the same change is sent again only after this long
const SHARE_MS = 1000;  // the tickers of one tab share a fetch this recent (their timers start together)
const PUSH_LATE_S = 6;  // a pushed feed this late is given up on: the fragment is rerun instead

function agoText(texts, seconds) {
  seconds = Math.max(0, Math.floor(seconds));
  return seconds < 120 ? texts.seconds.replace("{n}", seconds)
                       : texts.minutes.replace("{n}", Math.floor(seconds / 60));
}

// What should_rerun (mmcore/jobs/change_watch.py) says for marker `m` at server time `serverNow`. A
// pushed section (`aligned`) follows the server's windows of `progressS` instead (livefeed.py, _Feed.due).
function due(data, m, serverNow, progressS, aligned = false) {
  if (data.scope === "page" && m.store !== data.store) return true;
  const files = m.files || {};
  const grew = (data.follow_logs && m.logs !== data.logs)
    || Object.keys(data.files || {}).some((k) => (files[k] || 0) !== data.files[k]);
  if (!grew) return false;
  return aligned ? Math.floor(serverNow / progressS) > Math.floor(data.drawn_at / progressS)
                 : serverNow - data.drawn_at >= progressS;
}

function trigger(live, reason) {
  const now = Date.now();
  if (reason !== null && reason === live.sentFor && now - live.sentAt < RESEND_MS) return;
  live.sentFor = reason;
  live.sentAt = now;
  live.setTriggerValue("tick", now);
}

async function load(url) {
  const response = await fetch(new URL(url, document.baseURI), { cache: "no-store" });
  if (!response.ok) throw new Error(String(response.status));
  return response.json();
}

function fetchMarker(url) {
  const now = Date.now(), last = window.__minimindMarker;
  if (last && last.url === url && now - last.at < SHARE_MS) return last.promise;
  const promise = load(url);
  window.__minimindMarker = { url, at: now, promise };
  return promise;
}

// Without a marker: the page's ticker asks at every tick, a fragment's every progress_s.
function blind(live) {
  if (live.data.scope === "page" || Date.now() - live.sentAt >= 1000 * live.data.progress_s) trigger(live, null);
}

async function tick(live) {
  if (!live.host.isConnected) return stop(live);  // the component is gone
  if (!live.line.isConnected) live.host.appendChild(live.line);
  if (document.hidden) return;
  const data = live.data;
  if (live.syncPending) {  // drawn before the page said what it follows: let the fragment look once
    live.syncPending = false;
    return trigger(live, null);
  }
  if (!data.url) return blind(live);
  let m;
  try {
    m = await fetchMarker(data.url);
  } catch (e) {
    return blind(live);
  }
  if (live.data !== data || document.hidden) return;  // new data arrived or hidden meanwhile: the next tick looks
  const now = Date.now();
  if (m.checked_at !== live.lastChecked) {
    live.lastChecked = m.checked_at;
    live.lastAdvance = now;
  } else if (now - live.lastAdvance > STALE_MS) {
    return blind(live);  // nobody publishes any more
  }
  if (data.scope === "page" && m.error !== data.snapshot.error) return trigger(live, "error:" + m.error);
  const given = data.push ? { ...data, ...live.given } : data;
  if (due(given, m, m.checked_at, data.progress_s, !!data.push)) {
    if (!data.push) return trigger(live, JSON.stringify([m.store, m.logs, m.files]));
    return pull(live, m, given);
  }
  show(live, m);
}

// A fed section's pushed feed (mmcore/live/livefeed.py, Pusher): the server wrote it before publishing
// the marker that says the section grew. A feed not there in time (the session was busy, or no push)
// falls back on rerunning the fragment.
async function pull(live, m, given) {
  const data = live.data;
  let body = null;
  try {
    body = await load(data.push.url);
  } catch (e) {
    body = null;  // none pushed yet
  }
  if (live.data !== data) return;
  if (body && body.seq > live.given.seq) {
    live.given = { seq: body.seq, logs: body.logs, files: body.files, drawn_at: body.at };
    if (body.redraw) return trigger(live, "redraw:" + body.seq);
    return handOut(live, body.feed);
  }
  const dueAt = (Math.floor(given.drawn_at / data.progress_s) + 1) * data.progress_s;  // when it was due
  if (m.checked_at - dueAt >= PUSH_LATE_S) trigger(live, "late:" + live.given.seq);
}

// The "updated N s ago" line for marker (or snapshot) `m`: the page's ticker only, and not while the
// store cannot be read (the fragment says why).
function show(live, m) {
  const data = live.data;
  const hidden = data.scope !== "page" || !m || !!m.error;
  if (live.line.hidden !== hidden) live.line.hidden = hidden;
  if (hidden) return;
  const updated = due(data, m, Infinity, 0) ? data.drawn_at : Math.max(data.drawn_at, m.checked_at);
  // Set only when the words change: each change costs the page a style and layout pass.
  const text = data.texts.updated.replace("{ago}", agoText(data.texts, m.checked_at - updated));
  const title = data.texts.help.replace("{changed}", agoText(data.texts, m.checked_at - m.changed_at));
  if (live.line.textContent !== text) live.line.textContent = text;
  if (live.line.title !== title) live.line.title = title;
}

// The messages of a fed page section (mmcore/live/livefeed.py), by key: each goes to the element
// registered under that key (window.__minimindReceivers). Keys whose element is missing or cannot
// follow its message are reported once ("lost"): the server draws them afresh.
function handOut(live, feed) {
  if (feed.id === live.fedId) return;  // handed out already
  live.fedId = feed.id;
  const receivers = (window.__minimindReceivers ??= new Map());
  const lost = Object.keys(feed.messages).filter((key) => {
    const receiver = receivers.get(key);
    return !receiver || !receiver(feed.messages[key]);
  });
  if (lost.length) live.setTriggerValue("lost", { id: feed.id, keys: lost });
}

function stop(live) {
  clearInterval(live.timer);
  live.line.remove();
  document.removeEventListener("visibilitychange", live.onVisible);
  if (live.host.__minimindLive === live) delete live.host.__minimindLive;
}

export default function (component) {
  const { data, setTriggerValue, parentElement } = component;
  let live = parentElement.__minimindLive;
  if (!live) {
    const line = document.createElement("div");
    line.className = "live-line";
    parentElement.appendChild(line);
    live = parentElement.__minimindLive = { host: parentElement, line, sentFor: null, sentAt: Date.now(),
                                            lastChecked: null, lastAdvance: Date.now() };
    live.onVisible = () => tick(live);
    live.timer = setInterval(() => tick(live), Math.max(250, 1000 * data.interval_s));
    document.addEventListener("visibilitychange", live.onVisible);
  }
  const generation = live.generation = (live.generation || 0) + 1;
  if (data.push && data !== live.data) {  // what the tab was given: this run's, until a newer feed
    live.given = { seq: data.push.seq, logs: data.logs, files: data.files, drawn_at: data.drawn_at };
  }
  live.data = data;
  live.setTriggerValue = setTriggerValue;
  if (data.sync) live.syncPending = true;
  if (data.feed) handOut(live, data.feed);
  show(live, data.snapshot);
  return () => {
    if (live.generation === generation) stop(live);
  };
}
