"""What a profile is made of: its vocabulary (marker frames, labels, comments)."""
