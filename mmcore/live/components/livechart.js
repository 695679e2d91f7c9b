// A live Plotly chart (see mmcore/live/livechart.py and livechart_wire.py). The first message of a
// chart draws it; later ones ("extend") replace only the tails of its arrays, and Plotly.react redraws
// it with the same `uirevision`, so the user's zoom, pan and legend choices stay. A "same" message
// changes nothing. Messages come with the element's data or, on a page section kept current by a feed
// (mmcore/live/livefeed.py), from the feed, which finds the chart by its key. A message that does
// not follow what this element holds (it was remounted, or missed one) is "lost": the element's own
// data sends the trigger "lost", a feed's message is reported by the feed, and the server answers
// with a draw.
//
// Drawing waits for the chart to be on screen (scrolled near the view), for an animation frame, which a
// hidden tab does not run, for a hover label the user is reading to go (it is not swept away under
// the user's eyes; at most HOVER_WAIT_MS), and, for a chart that is slow to draw, for its turn
// (DRAW_SHARE). The only messages this element sends are the user's: a zoom
// or pan ("view": the x range, for the server to send that range at full resolution; null when zoomed
// out again), a click on a point ("clicked"), and "lost".
//
// This module and Plotly.js are files the server publishes in its static folder (`data.module`,
// `data.plotly`), each loaded once per page: the component's own code only imports this module.
// Streamlit calls the component again with each new `data` and keeps the element: the chart lives on
// the element, and each call hands it one message.
const HOVER_WAIT_MS = 20000;
// A chart's updates take at most about this share of the main thread: one that takes 20 ms to draw
// may draw every 0.4 s, one of 20 long runs that takes 300 ms every 6 s.
const DRAW_SHARE = 0.05;
// The chart's width comes from a ResizeObserver: it follows its column (a sidebar folded away changes no
// window size), and Plotly need not measure the page at each draw.
const CONFIG = { displaylogo: false, responsive: false };
const TYPES = { i4: Int32Array, f4: Float32Array, f8: Float64Array };
const AXIS = { automargin: true, ticks: "", zerolinewidth: 2 };  // as plotly.py's default template draws axes

function loadPlotly(url) {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  if (!window.__minimindPlotly) {
    window.__minimindPlotly = new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = new URL(url, document.baseURI).href;
      script.onload = () => resolve(window.Plotly);
      script.onerror = () => {
        window.__minimindPlotly = null;  // the next message tries again
        reject(new Error("cannot load " + script.src));
      };
      document.head.appendChild(script);
    });
  }
  return window.__minimindPlotly;
}

function bytesOf(b64) {
  if (Uint8Array.fromBase64) return Uint8Array.fromBase64(b64);  // native: 20 runs' arrays in a few ms
  const text = atob(b64);
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes;
}

function decode(encoded) {
  const values = new TYPES[encoded.dtype](bytesOf(encoded.b64).buffer);
  return encoded.dtype === "f8" ? values : Float64Array.from(values);
}

function joined(kept, tail) {
  const out = new Float64Array(kept.length + tail.length);
  out.set(kept);
  out.set(tail, kept.length);
  return out;
}

// Apply one message to the chart's arrays; false when it does not follow what the element holds.
function receive(chart, data) {
  // The same message again, or an older one of this chain (the element's data, after its feed's messages)
  if (data.epoch === chart.epoch && data.seq <= chart.seq) return true;
  if (data.op === "draw") {
    chart.layout = data.layout;
    chart.traces = data.traces;
    chart.arrays = Object.fromEntries(Object.entries(data.arrays).map(([k, v]) => [k, decode(v)]));
  } else if (data.epoch !== chart.epoch || data.op === "same" || data.after !== chart.seq) {
    return false;
  } else {
    for (const [key, change] of Object.entries(data.arrays)) {
      const held = chart.arrays[key];
      if (!held || held.length < change.keep) return false;
      chart.arrays[key] = joined(held.subarray(0, change.keep), decode(change.tail));
    }
  }
  chart.epoch = data.epoch;
  chart.seq = data.seq;
  chart.dirty = true;
  return true;
}

// The theme's text colour and font, read at most once a second: reading a computed style makes the
// browser settle every pending style change first, and charts drawn one after another would each pay it.
let theme = { at: -Infinity };

function themeOf(element) {
  const now = performance.now();
  if (now - theme.at > 1000) {
    const style = getComputedStyle(element instanceof Element ? element : document.body);
    theme = { at: now, text: style.getPropertyValue("--st-text-color").trim(),
              font: style.getPropertyValue("--st-font").trim() };
  }
  return theme;
}

function themed(chart) {
  const { text, font } = themeOf(chart.host);
  const grid = "rgba(128, 128, 128, 0.2)";
  const layout = chart.layout;
  return {
    ...layout,
    datarevision: chart.seq + ":" + chart.epoch,
    autosize: false,
    width: chart.width || undefined,
    paper_bgcolor: "rgba(0, 0, 0, 0)",
    plot_bgcolor: "rgba(0, 0, 0, 0)",
    font: { ...(text ? { color: text } : {}), ...(font ? { family: font } : {}) },
    hoverlabel: { align: "left", ...layout.hoverlabel },
    xaxis: { ...AXIS, gridcolor: grid, zerolinecolor: grid, ...layout.xaxis,
             title: { standoff: 15, ...(layout.xaxis || {}).title } },
    yaxis: { ...AXIS, gridcolor: grid, zerolinecolor: grid, ...layout.yaxis,
             title: { standoff: 15, ...(layout.yaxis || {}).title } },
  };
}

function schedule(chart) {
  // Hidden: nothing (a frame or a spacing timer begun before it was hidden may still end here); the
  // visibilitychange listener schedules again when the tab is shown.
  if (chart.frame || chart.spacing || !chart.dirty || !chart.onScreen || document.hidden) return;
  const wait = chart.userWaits ? 0 : chart.drawnAt + chart.drawMs / DRAW_SHARE - performance.now();
  if (wait > 0) {  // a big chart (many runs) draws less often
    chart.spacing = setTimeout(() => { chart.spacing = null; schedule(chart); }, wait);
    return;
  }
  chart.frame = requestAnimationFrame(() => {  // never runs while the tab is hidden
    chart.frame = null;
    if (document.hidden) return;
    const waited = Date.now() - chart.hoveredSince;
    if (chart.hoveredSince && waited < HOVER_WAIT_MS) {  // unhover, or the end of the wait, draws
      clearTimeout(chart.hoverTimer);
      chart.hoverTimer = setTimeout(() => { chart.hoveredSince = 0; schedule(chart); }, HOVER_WAIT_MS - waited);
      return;
    }
    draw(chart);
  });
}

async function draw(chart) {
  if (!chart.host.isConnected) return;
  let Plotly;
  try {
    Plotly = await loadPlotly(chart.url);
  } catch (e) {
    chart.div.textContent = String(e.message);
    return;
  }
  if (!chart.dirty || document.hidden) return;  // hidden while Plotly.js loaded: drawn when shown
  chart.dirty = false;
  const traces = chart.traces.map((t) => ({ ...t, x: chart.arrays[t.x], y: chart.arrays[t.y],
                                            ...(t.customdata ? { customdata: chart.arrays[t.customdata] } : {}) }));
  chart.drawing = true;
  chart.userWaits = false;
  const started = performance.now();
  try {
    await Plotly.react(chart.div, traces, themed(chart), CONFIG);
  } finally {
    chart.drawing = false;
    chart.drawnAt = performance.now();
    chart.drawMs = chart.drawnAt - started;
  }
  chart.div.style.minHeight = "";
  chart.draws = (chart.draws || 0) + 1;
  if (!chart.listening) listen(chart);
}

// A new x range (null: the whole x axis) for the server, which reruns the page for it: only when it
// differs from the last one reported (Plotly also reports an autorange it applied by itself).
function report(chart, view) {
  const text = JSON.stringify(view);
  if (text === (chart.reported ?? "null")) return;
  chart.reported = text;
  chart.userWaits = true;  // for the zoomed range's points: drawn as soon as they come
  chart.setStateValue("view", view);
}

function listen(chart) {
  chart.listening = true;
  chart.div.on("plotly_relayout", (event) => {
    if (chart.drawing) return;
    let range = event["xaxis.range"];
    if (event["xaxis.range[0]"] !== undefined) range = [event["xaxis.range[0]"], event["xaxis.range[1]"]];
    if (Array.isArray(range) && range.length === 2) {
      report(chart, { rev: chart.layout.uirevision, x: [Number(range[0]), Number(range[1])] });
    } else if (event["xaxis.autorange"]) {
      report(chart, null);
    }
  });
  // While a hover label shows, a redraw would sweep it away: it waits (see schedule).
  chart.div.on("plotly_hover", () => { chart.hoveredSince = chart.hoveredSince || Date.now(); });
  chart.div.on("plotly_unhover", () => { chart.hoveredSince = 0; schedule(chart); });
  chart.div.on("plotly_click", (event) => {
    const point = event.points && event.points[0];
    if (point && point.customdata !== undefined) chart.setTriggerValue("clicked", { x: point.x, customdata: point.customdata });
  });
}

function create(parentElement) {
  const div = document.createElement("div");
  div.className = "minimind-livechart";
  parentElement.appendChild(div);
  const chart = { host: parentElement, div, epoch: null, seq: 0, arrays: {}, traces: [], layout: {},
                  dirty: false, frame: null, spacing: null, drawnAt: 0, drawMs: 0, userWaits: false,
                  hoveredSince: 0, lostSent: null };
  chart.onVisible = () => schedule(chart);
  document.addEventListener("visibilitychange", chart.onVisible);
  chart.onScreen = false;  // a chart scrolled out of view draws when it comes back (the observer says at once)
  chart.observer = new IntersectionObserver((entries) => {
    chart.onScreen = entries[entries.length - 1].isIntersecting;
    schedule(chart);
  }, { rootMargin: "300px" });
  chart.observer.observe(div);
  chart.resizer = new ResizeObserver((entries) => {
    const width = Math.round(entries[entries.length - 1].contentRect.width);
    if (!width || width === chart.width) return;
    chart.width = width;
    if (chart.draws && window.Plotly) window.Plotly.relayout(div, { width });
  });
  chart.resizer.observe(div);
  div.__minimindChart = chart;  // for tests and benches: what the element holds and how often it drew
  return chart;
}

function stop(chart) {
  if (chart.frame) cancelAnimationFrame(chart.frame);
  clearTimeout(chart.hoverTimer);
  clearTimeout(chart.spacing);
  chart.observer.disconnect();
  chart.resizer.disconnect();
  document.removeEventListener("visibilitychange", chart.onVisible);
  if (window.Plotly) window.Plotly.purge(chart.div);
  chart.div.remove();
  if (chart.host.__minimindChart === chart) delete chart.host.__minimindChart;
}

export default function (component) {
  const { data, setStateValue, setTriggerValue, parentElement } = component;
  let chart = parentElement.__minimindChart;
  if (!chart) {
    chart = parentElement.__minimindChart = create(parentElement);
    chart.div.style.minHeight = (data.height || 340) + "px";  // the chart's room while Plotly.js loads
  }
  const generation = chart.generation = (chart.generation || 0) + 1;
  chart.url = data.plotly;
  // Plotly.js loads (and compiles, off the main thread) while the page is still arriving, not when the
  // first chart is about to draw; a failure is reported by draw, which tries again.
  loadPlotly(chart.url).catch(() => {});
  chart.setStateValue = setStateValue;
  chart.setTriggerValue = setTriggerValue;
  const receivers = (window.__minimindReceivers ??= new Map());
  const receiver = (message) => receive(chart, message) && (schedule(chart), true);
  receivers.set(data.key, receiver);  // a feed's messages for this chart (mmcore/live/livefeed.py)
  if (receive(chart, data)) {
    schedule(chart);
  } else if (chart.lostSent !== data.epoch + ":" + data.seq) {
    chart.lostSent = data.epoch + ":" + data.seq;  // once per message: the answer is a draw
    setTriggerValue("lost", chart.lostSent);
  }
  return () => {
    if (receivers.get(data.key) === receiver) receivers.delete(data.key);
    if (chart.generation === generation) stop(chart);
  };
}
