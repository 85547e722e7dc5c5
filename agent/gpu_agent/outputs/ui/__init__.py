"""`gpu-agent ui`: a local web UI over the profile store (docs/ui.md).

store.py (the directory), profiles.py (files decoded and cached), query.py (a range
merged, filtered, as a tree, a table, a diff, a pprof), api.py (the routes),
server.py (HTTP, tokens), static/ (the page; static/vendor/ is built by `make ui`).
"""
