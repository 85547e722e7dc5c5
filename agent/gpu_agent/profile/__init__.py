"""What a profile is made of and where it is kept: its vocabulary (marker frames,
labels, comments), the interval it covers (interval.py: the agent's period between
two profiles; "window" is only the shim's collection window), and the local store's
format (file names, writer's and reader's side)."""
