"""The dashboard's pages (Streamlit scripts run by st.navigation in streamlit_app.py)."""
