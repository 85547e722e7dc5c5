"""Layer 7, where profiles go: the local store, Parca and OTLP (export/), Prometheus
/metrics (metrics), the web UI (ui/), and the bounds every HTTP server of the
agent keeps against hostile clients (httpbounds). Imports the layers below."""
