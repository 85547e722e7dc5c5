"""What a profile is made of and where it is kept: its vocabulary (marker frames,
labels, comments) and the local store's format (file names, writer's and reader's side)."""
