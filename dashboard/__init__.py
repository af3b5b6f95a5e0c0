"""The ops dashboard: a Streamlit app over the telemetry store and the simulator (no torch).

``adaptive-spec dashboard`` starts it (``dashboard/cli.py``); ``app.py`` is the entry script,
``app_pages/`` the pages (they only render), ``data.py`` every store query, ``charts.py`` the
Altair charts, ``whatif.py`` the simulator runs of the What-if page.
"""
