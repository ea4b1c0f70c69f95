"""The Streamlit explorer's logic and figures; ``app.py`` at the root only lays out the page."""
