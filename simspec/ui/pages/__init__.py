"""The explorer page's Streamlit code, one module per part of the page; app.py lays them out.
The only modules of simspec that import streamlit (the ``app`` extra installs it): what they
show is computed in :mod:`simspec.ui` and :mod:`simspec.studies`, tested there."""
