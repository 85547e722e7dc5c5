"""Layer 4, what a profile is made of: its vocabulary (marker frames, labels,
comments), the pprof builder (pprof), the interval it covers (interval: the
agent's period between two profiles; "window" is only the shim's collection
window), and the local store's format (store: file names, writer's and reader's
side). Imports the layers below."""
