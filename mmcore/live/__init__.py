"""The live parts of the pages: what a tab shows while jobs run, kept current without rerunning the page.

`livepage` (the ticker, the change marker, log tails and the components' folder), `livechart`,
`livechart_wire` and `livechart_cache` (charts that grow in the browser), `livetable` (tables that do),
`livefeed` (a section's later changes pushed to the browser); `components/` holds their browser code.
They import streamlit, as `mmcore.widgets` do, and sit under them: widgets and pages draw with them."""
