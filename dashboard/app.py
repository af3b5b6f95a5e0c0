"""Entry script: ``streamlit run dashboard/app.py -- --telemetry-db PATH`` (``adaptive-spec dashboard``).

Streamlit runs this file on every rerun; it sets the page up and hands over to the chosen page.
Pages in priority order for the person on call: Live first (is speculation paying right now?),
then Alerts, Controllers, and What-if for capacity planning.
"""

from pathlib import Path

import streamlit as st

PAGES = Path(__file__).parent / "app_pages"

st.set_page_config(page_title="adaptive-spec", layout="wide")
page = st.navigation([
    st.Page(PAGES / "live.py", title="Live", default=True),
    st.Page(PAGES / "alerts.py", title="Alerts"),
    st.Page(PAGES / "controllers.py", title="Controllers"),
    st.Page(PAGES / "whatif.py", title="What-if"),
])
page.run()
