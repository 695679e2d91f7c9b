"""The dashboard's core: its wings (base, access, train, jobs, queue, logs, runs, models), the one
action layer (`mmcore.actions`) and the Streamlit widgets that pages compose (`mmcore.widgets`).
See docs/ARCHITECTURE.md for the map."""
