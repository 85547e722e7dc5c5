"""Layer 5, the join: each drain's rows placed in the intervals their periods overlap,
an interval held until its shims have published (placement); one interval checked
(invariants), estimated and split
across its sampled stacks (estimator), with PC samples (pc_samples), turned into
profiles by the Collector (each row a sample: samples), which owns the BPF session and names every kernel and
frame. Imports the layers below."""
