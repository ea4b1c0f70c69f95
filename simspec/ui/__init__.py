"""The Streamlit explorer: its logic, importable and tested without a browser (``inputs``,
``runs``, ``figures``, ``downloads``, ``fleet``, ``uploads``), and the page's Streamlit code in
``pages`` (the only modules of simspec that import streamlit); ``app.py`` at the root lays out
the page."""
