// A live HTML table (see mmcore/live/livetable.py and mmcore/jobs/htmltable.py, table_message). The
// first message draws the table (HTML the server made, its text escaped); later ones ("patch") replace
// the inner HTML of the cells that changed, so the table, its rows and its scroll position stay. A
// "same" message changes nothing. A message that does not follow what this element holds (it was
// remounted, or missed one) sends the trigger "lost", and the server answers with a draw.
//
// This module (receiver.js, then this file) is a file the server publishes in its static folder
// (`data.module`), loaded once per page. Streamlit calls the component again with each new `data` and
// keeps the element: the table lives on the element, and each call hands it one message. In a fed page
// section (mmcore/live/livefeed.py) the section's ticker hands it the later messages, by the table's key.
// Follow `data` -> whether it could (a message that does not follow what the element holds cannot).
function receive(element, held, data) {
  if (data.epoch === held.epoch && data.seq <= held.seq) return true;  // held already (or newer)
  if (data.op === "draw") {
    element.innerHTML = data.html;
    Object.assign(held, { epoch: data.epoch, seq: data.seq });
    return true;
  }
  const body = element.querySelector("tbody");
  if (data.op !== "patch" || !body || data.epoch !== held.epoch || data.after !== held.seq) return false;
  const rows = body.rows;
  if (!data.cells.every(([row, column]) => rows[row] && rows[row].cells[column])) return false;
  for (const [row, column, html] of data.cells) rows[row].cells[column].innerHTML = html;
  held.seq = data.seq;
  return true;
}

export default function (component) {
  return mountReceiver(component, "__minimindTable", { epoch: null, seq: 0 }, receive);
}
