"""Layer 2, where the data enters: the probe contract shared with the shim and BPF
(contract), the uprobes on the shim and parcagpu (shim_attach, parcagpu, stapsdt,
paths, preflight), the BPF session that polls the ring buffer and drains the maps
(bpf_session, its Python walker's maps in py_maps, bpf_maps, drain), and what the probes name: kernels (names,
cold_names) and devices (devices). Imports only the system layer."""
