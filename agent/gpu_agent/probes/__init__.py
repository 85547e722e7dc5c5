"""Where the data enters: what BPF hands the agent from the shim's probes."""
